"""The validating gateway's process: admission control and request checks in front of Triton's HTTP and gRPC.

A package of its own, run by the launcher as `python -m mslite_gateway` in a child process. It imports only
itself and the contract (`mslite_contract`); its extra `gateway` brings uvloop and hpack.
"""
