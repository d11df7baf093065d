"""The serving benchmark: `make bench` or `python -m benchmarks.run`. Not shipped, not part of the tests."""
