#!/usr/bin/env bash
# Builds Triton's own C++ ONNX Runtime backend (onnxruntime_backend r24.10) with the CUDA provider, so that
# the tritonserver 2.51 inside the nvidia-pytriton==0.7.0 wheel can serve `backend: "onnxruntime"` on KIND_GPU
# instances: the GPU peer a Triton user would pick instead of our python-based backend. Builds without a GPU.
#
#   build_ort_peer_gpu.sh OUT_DIR SOURCES_TARBALL [PYTHON]
#
# SOURCES_TARBALL: Triton's backend, core, common and onnxruntime_backend repositories at r24.10 plus the
#   ONNX Runtime C API header, as one .tar.gz with a top-level src/ (backend/, core/, common/,
#   onnxruntime_backend/, ort-header/onnxruntime_c_api.h). It is not kept in this repository (size); pass its
#   path. The C API is versioned, so the 1.19 header drives a newer library.
# PYTHON: an interpreter whose environment has nvidia-pytriton 0.7.0 (default: python3): the backend links
#   against that wheel's libtritonserver.
# Environment:
#   ORT_GPU_VERSION  the onnxruntime-gpu wheel whose core and CUDA provider the backend loads (default 1.31.1,
#                    the version our GPU workers run: both sides compute the same FP32)
#   WHEELS           a folder holding already downloaded wheels (default: a scratch folder, filled with
#                    `pip download`: onnxruntime-gpu, nvidia-cuda-nvcc, -runtime, -crt, nvidia-nvvm, -cccl;
#                    ~385 MB, never installed into any environment)
#   CUDA_ARCHS       CUDA architectures of the backend's one kernel (default 75-real;80-real;86-real;89-real;
#                    90-real: CUDA 13's nvcc no longer builds the r24.10 list's 53..72)
#
# OUT_DIR/onnxruntime/ receives libtriton_onnxruntime.so and the wheel's libonnxruntime.so.* and
# libonnxruntime_providers_{shared,cuda}.so (one build for core and providers: a CPU-only core cannot load the
# CUDA provider). Copy that folder into the --backend-directory of tritonserver 2.51; at run time the CUDA 13
# and cuDNN 9 libraries must be on LD_LIBRARY_PATH (the nvidia-* wheels of the worker's environment).
# Needs apt packages cmake g++ make rapidjson-dev googletest patchelf (installed when missing).
set -euo pipefail
OUT=$(mkdir -p "${1:?usage: build_ort_peer_gpu.sh OUT_DIR SOURCES_TARBALL [PYTHON]}" && cd "$1" && pwd)
SOURCES=${2:?usage: build_ort_peer_gpu.sh OUT_DIR SOURCES_TARBALL [PYTHON]}
PY=${3:-python3}
ORT_VERSION=${ORT_GPU_VERSION:-1.31.1}
ARCHS=${CUDA_ARCHS:-75-real;80-real;86-real;89-real;90-real}
WORK=$(mktemp -d /tmp/ort-peer-gpu-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
[ -f "$SOURCES" ] || { echo "sources tarball not found: $SOURCES"; exit 1; }

need=()
for p in cmake g++ make rapidjson-dev googletest patchelf; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

SP=$("$PY" -c 'import pytriton, os; print(os.path.dirname(os.path.dirname(pytriton.__file__)))') \
  || { echo "$PY cannot import pytriton (pip install nvidia-pytriton==0.7.0)"; exit 1; }
TLIB=$(ls "$SP"/nvidia_pytriton.libs/libtritonserver-*.so | head -1)

WHEELS=${WHEELS:-$WORK/wheels}
mkdir -p "$WHEELS"
if ! ls "$WHEELS"/onnxruntime_gpu-"$ORT_VERSION"-*.whl >/dev/null 2>&1; then
  # the wheels' binaries do not depend on the Python version; cp312 is what the GPU machine runs
  pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHEELS" "onnxruntime-gpu==$ORT_VERSION" nvidia-cuda-nvcc \
    nvidia-cuda-runtime nvidia-cuda-crt nvidia-nvvm nvidia-cuda-cccl
fi

# The CUDA toolkit, laid out as nvcc expects it (bin/, nvvm/, include/, lib/ under one root: nvidia/cu13)
mkdir -p "$WORK/cuda"
for w in "$WHEELS"/nvidia_cuda_nvcc-*.whl "$WHEELS"/nvidia_cuda_runtime-*.whl "$WHEELS"/nvidia_cuda_crt-*.whl \
  "$WHEELS"/nvidia_nvvm-*.whl "$WHEELS"/nvidia_cuda_cccl-*.whl; do
  "$PY" -m zipfile -e "$w" "$WORK/cuda"
done
CUDA_ROOT=$(ls -d "$WORK"/cuda/nvidia/cu1* | head -1)
chmod +x "$CUDA_ROOT"/bin/* "$CUDA_ROOT"/nvvm/bin/* 2>/dev/null || true
[ -e "$CUDA_ROOT/lib/libcudart.so" ] || ln -s "$(basename "$(ls "$CUDA_ROOT"/lib/libcudart.so.* | head -1)")" \
  "$CUDA_ROOT/lib/libcudart.so"
# nvcc.profile looks for CCCL under include/cccl
[ -d "$CUDA_ROOT/include/cccl" ] || { [ -d "$CUDA_ROOT/cccl" ] && ln -s ../cccl "$CUDA_ROOT/include/cccl"; } || true

# ONNX Runtime: the core and its providers from the one onnxruntime-gpu wheel
mkdir -p "$WORK/ort/include" "$WORK/ort/lib" "$WORK/ortwheel"
tar -xzf "$SOURCES" -C "$WORK"
cp "$WORK/src/ort-header/onnxruntime_c_api.h" "$WORK/ort/include/"
"$PY" - "$WHEELS"/onnxruntime_gpu-"$ORT_VERSION"-*.whl "$WORK/ort/lib" <<'EOF'
import sys, zipfile, os
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if "/capi/" in name and base.startswith("libonnxruntime") and "tensorrt" not in base:
            with open(os.path.join(dest, base), "wb") as f:
                f.write(z.read(name))
EOF
CORE=$(cd "$WORK/ort/lib" && ls libonnxruntime.so.* | head -1)
ln -sf "$CORE" "$WORK/ort/lib/libonnxruntime.so.1"
ln -sf libonnxruntime.so.1 "$WORK/ort/lib/libonnxruntime.so"

# CUDA 13's nvcc dropped the oldest architectures of the backend utilities' kernel list
sed -i "s/CUDA_ARCHITECTURES \"[^\"]*\"/CUDA_ARCHITECTURES \"$ARCHS\"/" "$WORK/src/backend/CMakeLists.txt"

export PATH="$CUDA_ROOT/bin:$PATH"
cmake -S "$WORK/src/onnxruntime_backend" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DTRITON_ENABLE_GPU=ON -DTRITON_ENABLE_ONNXRUNTIME_OPENVINO=OFF -DTRITON_ENABLE_ONNXRUNTIME_TENSORRT=OFF \
  -DCUDAToolkit_ROOT="$CUDA_ROOT" -DCMAKE_CUDA_COMPILER="$CUDA_ROOT/bin/nvcc" \
  -DTRITON_ONNXRUNTIME_INCLUDE_PATHS="$WORK/ort/include" -DTRITON_ONNXRUNTIME_LIB_PATHS="$WORK/ort/lib" \
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$WORK/src/common" \
  -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$WORK/src/core" \
  -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$WORK/src/backend" \
  -DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest -Wno-dev > "$WORK/configure.log" 2>&1 \
  || { tail -40 "$WORK/configure.log"; exit 1; }
nice -n 10 cmake --build "$WORK/build" --target triton-onnxruntime-backend -j2 > "$WORK/build.log" 2>&1 \
  || { grep -E "error|Error" "$WORK/build.log" | head -40; exit 1; }

rm -rf "$OUT/onnxruntime"; mkdir -p "$OUT/onnxruntime"
cp "$WORK/build/libtriton_onnxruntime.so" "$OUT/onnxruntime/"
cp -P "$WORK/ort/lib/"libonnxruntime* "$OUT/onnxruntime/"
# linked against the core's stub, which is named libtritonserver.so; the wheel ships it renamed
patchelf --replace-needed libtritonserver.so "$(basename "$TLIB")" "$OUT/onnxruntime/libtriton_onnxruntime.so"
patchelf --set-rpath '$ORIGIN' "$OUT/onnxruntime/libtriton_onnxruntime.so"
echo "links against:"; readelf -d "$OUT/onnxruntime/libtriton_onnxruntime.so" | grep NEEDED
echo "built $OUT/onnxruntime (onnxruntime_backend r24.10, TRITON_ENABLE_GPU=ON, onnxruntime-gpu $ORT_VERSION)"
