"""Seeded malformed requests over HTTP and gRPC, and the bar every answer must meet.

tests/integration/test_bad_input.py runs ~11,000 cases against the session server.

- `cases`: the catalogue (categories, the pattern each message must match) and `CaseGenerator`; the builders
  live in `malformed_tensors` and `malformed_requests`, starting from the valid draws of `models`;
- `encoding`: how a case becomes HTTP (JSON or binary-data extension), raw socket or gRPC bytes;
- `sending`: `Sender` (one worker's connections), `run_cases` (worker threads), `crash_probe`;
- `bar`: what counts as a pass (`violation`), the known gaps of Triton 2.51, the `Tally` of a run;
- `memory`: the server's process tree and its RSS.

Never generated, because one such request aborts Triton 2.51 (`std::bad_alloc`, see `crash_probe`): a JSON
body whose declared shape needs more than `encoding.JSON_ALLOC_LIMIT` bytes. The HTTP frontend allocates the
declared size before it reads `data`.
"""
