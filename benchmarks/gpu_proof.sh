#!/usr/bin/env bash
# The GPU proof in one command: MobileNetV2 served by 2 KIND_GPU workers (as before, with CUDA graphs, with graphs
# and the GPU batching defaults) beside Triton's C++ ONNX Runtime backend, against in-process ONNX Runtime CUDA:
# outputs, throughput, latency, images per execute, GPU memory per worker, the queue-delay sweep. Every result goes
# to $OUT (summary.json, log.txt, latencies.csv, tritonserver.log, device.txt); the bars are printed at the end.
# The measuring itself is benchmarks/gpu_proof.py.
#
# On the GPU machine, after the environment set-up (docs/performance.md, "GPU"), with the peer built by
# benchmarks/build_ort_peer_gpu.sh (its onnxruntime/ folder, or a folder with only its libtriton_onnxruntime.so:
# the installed onnxruntime-gpu's libraries are then linked beside it; without a peer its bars are MISSING):
#     GPU_PROOF_PEER=/path/to/onnxruntime bash benchmarks/gpu_proof.sh
# It writes benchmarks/results/gpu/summary.json, the committed summary. Here, on CPU, to test the script end to
# end in a few minutes (KIND_CPU workers, the CPU provider, short windows, one round; written to /tmp):
#     bash benchmarks/gpu_proof.sh --dry-run
#
# What it takes from GPU_PROOF_EXTRA (default .gpu/extra), when there: model.onnx and model_bs1.onnx,
# bin/perf_analyzer with lib/ (libb64.so.0d, libcudart.so.12), and wheels/ (Python packages the machine
# lacks). Missing pieces come from this checkout: the generated model (make models), .tools-venv's perf_analyzer.
# Environment: GPU_PROOF_PEER (the C++ peer's backend folder), GPU_PROOF_PA (a perf_analyzer binary),
# GPU_PROOF_PYTHON, GPU_PROOF_EXTRA (below), OUT. Other arguments go to gpu_proof.py (see its --help).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DEVICE=${GPU_PROOF_DEVICE:-gpu}
DRY=()
if [ "${1:-}" = "--dry-run" ]; then
  shift
  DEVICE=cpu
  DRY=(--levels 1,8 --rounds 1 --interval-ms 500 --seconds 1.5 --sweep-delays 500)
fi
EXTRA=${GPU_PROOF_EXTRA:-$ROOT/.gpu/extra}
if [ "$DEVICE" = gpu ]; then OUT=${OUT:-$ROOT/benchmarks/results/gpu}; else OUT=${OUT:-/tmp/gpu-proof-dry-run}; fi
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
echo "gpu_proof: device=$DEVICE root=$ROOT out=$OUT $(date -u +%FT%TZ)"

# Python: the one on PATH (the GPU set-up puts its venv first), else this checkout's .venv
PY=${GPU_PROOF_PYTHON:-}
if [ -z "$PY" ]; then
  if [ "$DEVICE" = cpu ] && [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=$(command -v python3); fi
fi

# Packages the machine lacks, and this checkout's packages on the path when they are not installed
SHIM=$(mktemp -d /tmp/gpu-proof-shim.XXXXXX)
if [ -d "$EXTRA/wheels" ] && ls "$EXTRA"/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SHIM/site" "$EXTRA"/wheels/*.whl \
    || python3 -m pip install -q --no-index --no-deps --no-compile --target "$SHIM/site" "$EXTRA"/wheels/*.whl \
    || /opt/torch/.venv/bin/python3 -m pip install -q --no-index --no-deps --no-compile --target "$SHIM/site" \
      "$EXTRA"/wheels/*.whl \
    || echo "WARNING: the wheels in $EXTRA/wheels do not install for $PY"
fi
# this checkout's client and backend, ahead of any installed copy
ln -s "$ROOT/client/mslite_triton" "$SHIM/mslite_triton"
ln -s "$ROOT/backend/mslite" "$SHIM/mslite_triton_backend"
ln -s "$ROOT/backend/mslite/mslite_backend" "$SHIM/mslite_backend"
if [ -n "${TRITON_WHEEL_ROOT:-}" ]; then
  # an unpacked nvidia-pytriton wheel (the GPU set-up): only its tritonserver folder and libraries are used
  mkdir -p "$SHIM/pytriton" && touch "$SHIM/pytriton/__init__.py"
  ln -s "$TRITON_WHEEL_ROOT" "$SHIM/pytriton/tritonserver"
  ln -s "$(dirname "$(dirname "$TRITON_WHEEL_ROOT")")/nvidia_pytriton.libs" "$SHIM/nvidia_pytriton.libs"
fi
export PYTHONPATH="$ROOT:$SHIM:$SHIM/site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# perf_analyzer (tritonclient 2.40's binary) and its libraries, for perf_analyzer alone (GPU_PROOF_PA_LIBS)
if [ -n "${GPU_PROOF_PA:-}" ]; then
  PA=$GPU_PROOF_PA
  PA_LIBS=$(ls -d "$(dirname "$(dirname "$PA")")"/lib/python3*/site-packages/nvidia/cuda_runtime/lib 2>/dev/null | head -1)
elif [ -x "$EXTRA/bin/perf_analyzer" ]; then
  PA=$EXTRA/bin/perf_analyzer
  PA_LIBS=$EXTRA/lib
  # OpenSSL 3 from the machine, else the carried copy
  if LD_LIBRARY_PATH="$PA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$PA" | grep -q "not found" \
    && [ -d "$EXTRA/lib-ssl" ]; then PA_LIBS=$PA_LIBS:$EXTRA/lib-ssl; fi
else
  PA=$ROOT/.tools-venv/bin/perf_analyzer
  PA_LIBS=$(ls -d "$ROOT"/.tools-venv/lib/python3*/site-packages/nvidia/cuda_runtime/lib 2>/dev/null | head -1)
fi
export GPU_PROOF_PA_LIBS=$PA_LIBS
LD_LIBRARY_PATH="$PA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PA" --version >/dev/null 2>&1 \
  || echo "WARNING: perf_analyzer does not start: $(LD_LIBRARY_PATH="$PA_LIBS" ldd "$PA" | grep "not found")"

# The models: carried, else generated here (the dynamic-batch one by make models, the batch-1 one from it)
MODEL=$EXTRA/model.onnx
[ -f "$MODEL" ] || MODEL=$ROOT/model_repository/mobilenetv2/1/model.onnx
if [ ! -f "$MODEL" ]; then "$PY" model_repository/generate_models.py || exit 1; fi
MODEL_BS1=$EXTRA/model_bs1.onnx
if [ ! -f "$MODEL_BS1" ]; then
  MODEL_BS1=$SHIM/model_bs1.onnx
  "$PY" - "$MODEL" "$MODEL_BS1" <<'PYEOF' || exit 1
import sys, onnx
m = onnx.load(sys.argv[1])
for v in (m.graph.input[0], m.graph.output[0]):
    v.type.tensor_type.shape.dim[0].dim_value = 1  # the batch fixed to 1, as the multi-card sample's converter does
onnx.save(m, sys.argv[2])
PYEOF
fi

{ uname -a; nproc; (nvidia-smi -L && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv) 2>&1
  "$PY" -c "import sys, numpy, onnxruntime as o; print(sys.version); print('numpy', numpy.__version__, 'ort', o.__version__, o.get_available_providers())"
} > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

PEER=()
if [ -n "${GPU_PROOF_PEER:-}" ]; then
  PEER_DIR=$GPU_PROOF_PEER
  if [ ! -e "$PEER_DIR/libonnxruntime.so.1" ]; then
    # only libtriton_onnxruntime.so was carried: ONNX Runtime's core and providers from the installed
    # onnxruntime(-gpu), linked beside it (the core finds its providers next to itself)
    CAPI=$("$PY" -c 'import onnxruntime, os; print(os.path.join(os.path.dirname(onnxruntime.__file__), "capi"))')
    PEER_DIR=$SHIM/peer
    mkdir -p "$PEER_DIR" && cp "$GPU_PROOF_PEER/libtriton_onnxruntime.so" "$PEER_DIR/"
    for f in "$CAPI"/libonnxruntime*.so*; do ln -s "$f" "$PEER_DIR/"; done
    CORE=$(cd "$PEER_DIR" && ls libonnxruntime.so.1.* | head -1)
    ln -sf "$CORE" "$PEER_DIR/libonnxruntime.so.1"
  fi
  PEER=(--peer-backend "$PEER_DIR")
fi
"$PY" -m benchmarks.gpu_proof --device "$DEVICE" --model "$MODEL" --model-bs1 "$MODEL_BS1" \
  --perf-analyzer "$PA" --out "$OUT" "${PEER[@]}" "${DRY[@]}" "$@"
rc=$?
rm -rf "$SHIM"
echo "gpu_proof: exit $rc $(date -u +%FT%TZ)"
exit $rc
