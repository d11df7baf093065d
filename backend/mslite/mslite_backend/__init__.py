"""ONNX Runtime side of the `mslite` Triton backend.

Nothing in this package imports `triton_python_backend_utils`: `model.py` beside it is the only
Triton adapter, so every module here is testable without a server. Python 3.10 compatible.
"""
