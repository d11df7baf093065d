"""The validating gateway's process: admission control and request checks in front of Triton's HTTP and gRPC."""
