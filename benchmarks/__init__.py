"""The benchmark of issue 4: `make bench` or `python -m benchmarks.run`. Not shipped, not part of the tests."""
