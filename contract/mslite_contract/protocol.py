"""The wire contract: names and rules the client and the backend must agree on, defined once.

The backend uses this module inside Triton; the client imports it as
`mslite_contract.protocol`. It imports nothing heavy (no numpy, no onnx), so both
sides can load it anywhere. The Java client keeps copies of some names; a unit test checks them here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BACKEND_NAME = "mslite"  # the backend's name in a model config (`backend: "mslite"`) and its folder in Triton's

# -- a model's execute deadline (`execute_deadline_s`, `deadline.ExecuteWatch`) --------------------------
DEADLINE_EXIT_CODE = 86  # how a worker that ended itself at its deadline exits: the supervisor's log says why
DEADLINE_PASSED = "ran past the model's execute deadline"  # in the request's error: the client's timeout error

# -- the dynamic batcher ------------------------------------------------------------------------------
DEFAULT_MAX_BATCH_SIZE = 64  # auto-complete's max_batch_size for models whose tensors all have a dynamic first dim
CPU_PREFERRED_BATCH = (2,)  # requests Triton hands a CPU worker per `execute` (each still runs alone)
DEFAULT_GPU_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # the batch sizes a GPU worker runs at unless `batch_buckets` says
# How long Triton may hold a request for a GPU worker to fill a bucket: PROVISIONAL, not yet measured. The
# GPU proof run (benchmarks/gpu_proof.sh) measures 0 / 100 / 300 / 500 us and this becomes its best value.
GPU_MAX_QUEUE_DELAY_US = 100

BATCHING_SECTION = "dynamic_batching"  # the client's config section (and Triton's config field) for the batcher
MAX_BATCH_SIZE_KEY = "max_batch_size"
MAX_QUEUE_DELAY_KEY = "max_queue_delay_microseconds"
PREFERRED_BATCH_SIZE_KEY = "preferred_batch_size"
MAX_QUEUE_SIZE_KEY = "max_queue_size"  # opt-in queue bound; 0 or absent: no bound (Triton's own reading of 0)
QUEUE_POLICY_KEY = "default_queue_policy"  # Triton's field that carries max_queue_size
BATCHING_KEYS = (MAX_BATCH_SIZE_KEY, MAX_QUEUE_DELAY_KEY, PREFERRED_BATCH_SIZE_KEY, MAX_QUEUE_SIZE_KEY)


def queue_policy(max_queue_size: int) -> dict[str, Any]:
    """The dynamic batcher fields for a queue bound the user asked for: none for 0.

    No bound is the default. Triton 2.51's dynamic batcher forms the next batch while the workers are
    busy only when the model has no queue policy at all (its priority queue turns prefetching off with
    one), and a single instance with a policy waits up to 500 ms for work now and then. A bound is
    therefore an opt-in with a cost: beyond it Triton refuses requests at once, and batches are formed
    only when a worker asks.

    Raises:
        ValueError: a negative size.
    """
    if max_queue_size < 0:
        raise ValueError(f"[{BATCHING_SECTION}] {MAX_QUEUE_SIZE_KEY} must be >= 0, got {max_queue_size}")
    return {QUEUE_POLICY_KEY: {MAX_QUEUE_SIZE_KEY: max_queue_size}} if max_queue_size else {}


# A graph this small runs a sample in a few microseconds on CPU (a handful of kernels, under 1 us each,
# over a few thousand values): far less than Triton's hand-off of one `execute` to a python worker (an
# IPC round trip of ~85-90 us of the worker's CPU). See `is_light`.
LIGHT_MAX_NODES = 16
LIGHT_MAX_WEIGHT_BYTES = 64 * 1024
LIGHT_MAX_SAMPLE_VALUES = 4096


def is_light(nodes: int | None, weight_bytes: int | None, sample_values: int | None) -> bool:
    """Whether a sample's run costs far less than the hand-off of an `execute` (LIGHT_MAX_*).

    Needs a known size: operators, bytes of weights (initializers and Constants), and input values per
    sample (None when a dim other than the batch is dynamic). For such a model, the more queued requests
    one `execute` takes the better: its cost is the hand-off, and no worker can hoard work that takes
    microseconds, and its requests of one `execute` run as one merged run on CPU (the backend's
    `BackendConfig.merges_for`). The backend's auto-complete and merging and the client's configs judge
    with this one rule.
    """
    if nodes is None or weight_bytes is None or sample_values is None:
        return False
    return (
        nodes <= LIGHT_MAX_NODES and weight_bytes <= LIGHT_MAX_WEIGHT_BYTES and sample_values <= LIGHT_MAX_SAMPLE_VALUES
    )


def sample_values(shapes: Iterable[Sequence[int] | None], *, batched: bool) -> int | None:
    """Input values per sample, for `is_light`.

    Each input's dims multiplied (less the batch dim when `batched`), added up; None when an input's shape is
    unknown or a dim is dynamic (negative).
    """
    total = 0
    for shape in shapes:
        if shape is None:
            return None
        dims = shape[1:] if batched else shape
        if any(d < 0 for d in dims):
            return None
        n = 1
        for d in dims:
            n *= d
        total += n
    return total


def capped_buckets(sizes: Sequence[int], max_batch_size: int) -> tuple[int, ...]:
    """`sizes` up to `max_batch_size`, and `max_batch_size` itself when the largest kept is below it."""
    if not sizes:
        return ()
    kept = tuple(b for b in sizes if b <= max_batch_size)
    return kept + ((max_batch_size,) if not kept or kept[-1] < max_batch_size else ())


def batcher_defaults(
    dynamic_batching: Mapping[str, Any],
    *,
    max_batch_size: int,
    cpu_only: bool,
    light: bool = False,
    gpu_buckets: Sequence[int] = (),
) -> dict[str, Any]:
    """The dynamic batcher fields we set when the config leaves them out (both the client and auto-complete).

    On CPU workers, at most CPU_PREFERRED_BATCH requests per `execute`: each runs alone, and handing a
    worker two queued requests keeps it busy across the hand-off to Triton without letting one worker
    take the whole queue from the others. A `light` model (`is_light`) gets no such cap: Triton hands a
    worker every queued request, as the naive python backend gets them (the tiny model, 2 workers x 1
    thread, c=8: 2.7 requests per `execute` against 1.9 with two at most, and less worker CPU per
    request). Accelerators keep Triton's batch sizes. Sizes above `max_batch_size` are left out (Triton
    refuses them). No queue policy is ever added (`queue_policy`).

    GPU workers (`gpu_buckets`: the batch sizes their sessions run at) get the buckets above 1 as preferred
    sizes, so Triton sends a batch at once when it fills a bucket (listing 1 would cancel the delay), and
    GPU_MAX_QUEUE_DELAY_US to wait for one.
    """
    fill: dict[str, Any] = {}
    if gpu_buckets:
        preferred = [b for b in gpu_buckets if 1 < b <= max_batch_size]
        if preferred and not dynamic_batching.get(PREFERRED_BATCH_SIZE_KEY):
            fill[PREFERRED_BATCH_SIZE_KEY] = preferred
        if MAX_QUEUE_DELAY_KEY not in dynamic_batching:
            fill[MAX_QUEUE_DELAY_KEY] = GPU_MAX_QUEUE_DELAY_US
        return fill
    fitting = [b for b in CPU_PREFERRED_BATCH if b <= max_batch_size]
    if cpu_only and not light and fitting and not dynamic_batching.get(PREFERRED_BATCH_SIZE_KEY):
        fill[PREFERRED_BATCH_SIZE_KEY] = fitting
    return fill


# -- the model config's parameters: the client writes them, the backend reads them --------------------------
# `parameters { key: ... }` of a model's config, each a string. MindSpore Lite's own names; the backend also
# takes ONNX Runtime's names for the two thread counts, and its own keys (backend config.py).
THREAD_NUM_PARAMETER = "thread_num"  # threads of one worker's session
INTER_OP_PARALLEL_NUM_PARAMETER = "inter_op_parallel_num"
THREAD_AFFINITY_MODE_PARAMETER = "thread_affinity_mode"  # 0: none, 1: big cores first, 2: middle cores first
THREAD_AFFINITY_CORE_LIST_PARAMETER = "thread_affinity_core_list"  # cores, comma-separated
PRECISION_MODE_PARAMETER = "precision_mode"  # enforce_fp32 or preferred_fp16 (CPU and GPU workers)
ASCEND_DEVICE_IDS_PARAMETER = "ascend_device_ids"  # worker i's device is the i-th, comma-separated
ASCEND_PROVIDER_PARAMETER = "ascend_provider"
ASCEND_PRECISION_MODE_PARAMETER = "ascend_precision_mode"
# A MindSpore Lite config file's `[section] key=value` reaches the backend as the parameter `section.key`.
SECTION_SEPARATOR = "."


def section_parameter(section: str, key: str) -> str:
    """The model-config parameter that carries a config file's `[section] key` (`SECTION_SEPARATOR`)."""
    return f"{section}{SECTION_SEPARATOR}{key}"


# -- a config file's [runner] section: the client's own, never sent to the server ---------------------
# `max_pending_predicts` bounds a Model's or runner's predicts in flight; `workers_num` and `thread_num` are
# what `mslite-triton tune` writes into the config.ini it leaves beside a tuned model (the client uses them
# where its Context leaves them at 0).
RUNNER_SECTION = "runner"
MAX_PENDING_KEY = "max_pending_predicts"
# predicts one Model or runner may have in flight unless `MAX_PENDING_KEY` says (MindSpore Lite's task-queue
# bound, kNumMaxTaskQueueSize); the three clients share it
DEFAULT_MAX_PENDING = 1000
WORKERS_KEY = "workers_num"
THREADS_KEY = "thread_num"
RUNNER_KEYS = (MAX_PENDING_KEY, WORKERS_KEY, THREADS_KEY)


# -- resized inputs ----------------------------------------------------------------------------------
# `Model.resize` (and a runner predict) at a shape the ONNX file fixes: the client builds the model again with
# this model parameter, a JSON object {input name: [full shape asked for]}. The backend makes every fixed dim
# that differs from the asked size symbolic, drops the graph's stale inner shape annotations, and runs the
# asked shapes once at load, so a graph that cannot take them (a fixed Reshape) fails the load with the reason.
# Every client (Python, C++, Java) builds again exactly when a shape of the input's rank differs from the served
# model's metadata in a dim it gives as fixed (>= 0); all else about the resize is the backend's (resized.py).
RESIZED_INPUTS_PARAMETER = "resized_inputs"


# -- weights updates ----------------------------------------------------------------------------------
# A weights update is an inference request that carries UPDATE_PARAMETER (the JSON manifest of the new
# tensors: name, dtype, shape) and their bytes in the optional input WEIGHTS_INPUT, or, with FILE_PARAMETER,
# the name of a file that a client on the server's host wrote into /dev/shm.
UPDATE_PARAMETER = "mslite_weights_update"
FILE_PARAMETER = "mslite_weights_file"
WEIGHTS_INPUT = "__mslite_weights__"
# Proof that the sender holds the admin key: `v2.<unix seconds>.<nonce>.<hex HMAC-SHA256>`, the MAC taken
# under the key over `update_message(...)`, which covers the update's bytes (their SHA-256 when they travel
# in WEIGHTS_INPUT). The key itself never travels in a request.
# The config keys that name the updatable weights: MindSpore Lite's `[ascend_context] variable_weights_list`
# as it stands in a hand-written config or as the client forwards it, or the neutral `[weights] updatable`.
VARIABLE_WEIGHTS_KEYS = ("variable_weights_list", "ascend_context.variable_weights_list", "weights.updatable")
# A client on the server's host writes a full update straight into /dev/shm, in the store's version layout
# (every tensor at an UPDATE_ALIGN-byte offset), under a name starting UPLOAD_PREFIX; the worker links it in.
# A worker that cannot use the file answers with FILE_REFUSED in its message, and the client sends inline.
UPLOAD_PREFIX = "mslite_weights_upload_"
UPDATE_ALIGN = 64
FILE_REFUSED = "update file not usable on the server's host"
PROOF_PARAMETER = "mslite_weights_proof"
PROOF_SCHEME = "v2"
PROOF_WINDOW_S = 60  # a proof older or newer than this (clock skew included) is refused


def update_message(model: str, manifest: str, file: str, digest: str, timestamp: int, nonce: str) -> bytes:
    """The bytes a proof's MAC covers: the model, what the update writes, its bytes or file, and when.

    `digest` is `payload_digest` of the inline values ("" for an update file: its name is covered, and
    the worker takes only a file of its own user). Fields are length-prefixed, so no two different
    updates share a message.
    """
    fields = (PROOF_SCHEME, model, manifest, file, digest, str(timestamp), nonce)
    return b"".join(f"{len(f.encode())}:".encode() + f.encode() for f in fields)


def payload_digest(data: Any) -> str:
    """SHA-256 (hex) of an update's inline values: any C-contiguous buffer, e.g. a uint8 array."""
    import hashlib

    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


def update_mac(key: str, model: str, manifest: str, file: str, digest: str, timestamp: int, nonce: str) -> str:
    """HMAC-SHA256 of `update_message(...)` under `key`, in hex."""
    import hashlib
    import hmac

    message = update_message(model, manifest, file, digest, timestamp, nonce)
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def sign_update(
    key: str, model: str, manifest: str, file: str = "", *, data: Any = None, now: float | None = None
) -> str:
    """The PROOF_PARAMETER value of one update.

    Args:
        key: the server's admin key.
        model: the model's name.
        manifest: the UPDATE_PARAMETER value.
        file: the FILE_PARAMETER value, or "" when the values travel inline.
        data: the inline values exactly as sent in WEIGHTS_INPUT (None with `file`).
        now: the time to sign with (default: now).
    """
    import secrets
    import time

    timestamp = int(time.time() if now is None else now)
    nonce = secrets.token_hex(12)
    digest = "" if data is None else payload_digest(data)
    return f"{PROOF_SCHEME}.{timestamp}.{nonce}.{update_mac(key, model, manifest, file, digest, timestamp, nonce)}"


def parse_proof(proof: str) -> tuple[int, str, str]:
    """Timestamp, nonce and MAC of a PROOF_PARAMETER value.

    Raises:
        ValueError: not a proof of the known scheme.
    """
    parts = proof.split(".")
    if len(parts) != 4 or parts[0] != PROOF_SCHEME or not parts[1].isdigit() or not parts[2].isalnum():
        raise ValueError(f"a weights update proof looks like '{PROOF_SCHEME}.<time>.<nonce>.<mac>'")
    return int(parts[1]), parts[2], parts[3]


# -- the launcher's weights stores ------------------------------------------------------------------------
WEIGHTS_STORE_PREFIX = "mslite_weights_"

# -- the clients' shared-memory regions ---------------------------------------------------------------------
SHM_DIR = "/dev/shm"  # where POSIX shared-memory regions appear as files (Linux)
# A client registers a region per connection for its large inputs, `<CLIENT_REGION_PREFIX><pid>_<n>` (the name
# and its /dev/shm file alike); the launcher's supervisor unregisters those of clients that died
# (owned_files.py: how files named after their owner's pid are swept).
CLIENT_REGION_PREFIX = "mslite_client_"
# The gateway stages large inputs the same way, in regions `<GATEWAY_REGION_PREFIX><pid>_<n>`
# (the gateway's staging.py); the supervisor sweeps a dead gateway's as a dead client's,
# and the gateway refuses requests from clients that name one.
GATEWAY_REGION_PREFIX = "mslite_gateway_"

# -- the admin key and the gateway ---------------------------------------------------------------------------
# The header that carries the admin key on HTTP, and as gRPC metadata (Triton matches gRPC metadata with its own
# prefix). The client sends it, the launcher restricts tritonserver's admin APIs to it, the gateway checks it.
ADMIN_KEY_HEADER = "mslite-key"
ADMIN_KEY_GRPC_HEADER = f"triton-grpc-protocol-{ADMIN_KEY_HEADER}"
# The word a refusal for overload starts with (MindSpore Lite's status for a full task queue): the gateway's
# admission control answers with it, and the client raises `ServiceDenyError` on it.
SERVICE_DENY = "kLiteServiceDeny"
# The gateway process prints this line on stdout once both its ports listen; the launcher waits for it.
GATEWAY_READY_LINE = "ready"
# The gateway's process is started as `python -m GATEWAY_MODULE` (a string: the launcher does not import it).
GATEWAY_MODULE = "mslite_gateway"
# How the launcher names a Unix socket to the gateway (`--upstream-http unix:PATH`): gRPC's own form of it,
# which tritonserver's `--grpc-address` and tritonclient's gRPC client take too.
UNIX_ADDRESS_PREFIX = "unix:"
