"""What the processes share: wire names and parameter keys, settings, scrubbing, dtypes, owned files, formats.

The client library, the launcher, the gateway and Triton's workers all import it; it imports nothing of
theirs (standard library and numpy only; MindSpore only inside the MindIR converter's child process).
"""
