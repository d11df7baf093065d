"""The bad-input campaign: `python -m benchmarks.badinput` (see `__main__`).

The generator, the wire encoding, the sending and the bar are the test suite's, in `tests/support/badinput/`
(tests/integration/test_bad_input.py runs ~11,000 of its cases against the session server); this package
is only the long campaign's command.
"""
