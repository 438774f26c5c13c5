#!/usr/bin/env bash
# The GPU check of issue 44: the one script a machine with an NVIDIA GPU runs, from the repository root.
#
#   OUT=/some/folder bash benchmarks/gpu_check.sh        # OUT defaults to out/gpu_check
#
# Stages, each command under `timeout` so one hang cannot eat the machine's time (about 5 minutes in all):
#   1. set-up: nvidia-smi -L, the versions of what the GPU backend imports; vtakit is used from the
#      checkout (PYTHONPATH), nothing is installed unless llvmlite is older than the IR needs
#      (then a wheel in .whl/, carried there, is installed under /tmp/site);
#   2. the GPU backend's tests, those not marked slow (the needs_gpu ones skip without a GPU; the
#      emulator and ptxas ones run too; the slow ones are emulator sweeps, no GPU in them): JUnit XML with the measured float errors; every failing check's arrays under
#      failures/ (tests/support/gpu_marks.keep_on_failure), zipped to failures.zip at the end;
#   3. benchmarks/cuda_kernels.py --json: our kernels against PyTorch's at the zoo's shapes;
#   4. benchmarks/gpu_networks.py: ResNet-18 and MobileNet-v1 against PyTorch and onnxruntime.
# Without a GPU every stage still runs and the GPU parts say why they skipped.  At most 7 files land
# in $OUT: check.log, setup.txt, tests.log, junit.xml, failures.zip, cuda_kernels.json, gpu_networks.json.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
JOBS=${JOBS:-8}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export VTAKIT_GPU_FAILURES=/tmp/vtakit-gpu-failures
rm -rf "$VTAKIT_GPU_FAILURES"
exec > >(tee -a "$OUT/check.log") 2>&1

stage() {  # stage NAME SECONDS FILE COMMAND...: COMMAND's output to FILE under a time limit; says how it ended
    local name=$1 limit=$2 file=$3 start=$SECONDS rc
    shift 3
    echo "== $name (limit ${limit}s)"
    timeout -k 5 "$limit" "$@" > "$file" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "!! $name ran past ${limit}s and was stopped"
    echo "== $name: exit $rc after $((SECONDS - start))s"
    return $rc
}

setup() {
    timeout 20 nvidia-smi -L || echo "nvidia-smi: not available"
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null
    timeout 60 "$PY" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("numpy", "onnx", "llvmlite", "cuda.bindings", "rich", "threadpoolctl", "scipy", "pytest", "xdist",
             "onnxruntime", "torch", "ml_dtypes"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as exc:
        print(f"{name} MISSING ({type(exc).__name__}: {exc})")
EOF
    if ! timeout 30 "$PY" -c "import llvmlite, sys; sys.exit(tuple(map(int, llvmlite.__version__.split('.')[:2])) < (0, 45))"; then
        if ls .whl/llvmlite-*.whl >/dev/null 2>&1; then
            echo "llvmlite is older than 0.45: installing the carried wheel under /tmp/site"
            timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/llvmlite-*.whl \
                && export PYTHONPATH="/tmp/site:$PYTHONPATH"
        else
            echo "llvmlite is older than 0.45 and no wheel is in .whl/: the GPU IR may not build"
        fi
    fi
    timeout 60 "$PY" -c "from vtakit.compiler.backends import cuda; print('gpu_available:', *cuda.gpu_available())"
}

echo "== set-up"
setup > "$OUT/setup.txt" 2>&1  # a function, not a subshell: the PYTHONPATH it may set holds below
cat "$OUT/setup.txt"

TESTS=(tests/unit/compiler/backends/cuda tests/integration/compiler/backends/cuda)
stage "tests" 170 "$OUT/tests.log" "$PY" -m pytest -p no:cacheprovider -q -rs -n "$JOBS" \
    --junitxml="$OUT/junit.xml" -o junit_family=xunit1 -m "not slow" "${TESTS[@]}"
tail -n 40 "$OUT/tests.log"

stage "kernel benchmark" 50 "$OUT/cuda_kernels.json" "$PY" benchmarks/cuda_kernels.py --json --calls 20 --repeat 5
head -c 600 "$OUT/cuda_kernels.json"; echo
# the rows go to the JSON file as they are measured; its progress (one line per row) to the log
stage "network benchmark" 140 /tmp/vtakit-gpu-networks.log "$PY" benchmarks/gpu_networks.py \
    --out "$OUT/gpu_networks.json"
grep -v '^ \|^{\|^}' /tmp/vtakit-gpu-networks.log | tail -n 40

"$PY" - "$VTAKIT_GPU_FAILURES" "$OUT/failures.zip" <<'EOF'
"""Every kept failure in one zip (at most 15 MB: the arrays of later ones are left out, their names kept)."""
import sys, zipfile
from pathlib import Path
folder, target = Path(sys.argv[1]), Path(sys.argv[2])
files = sorted(folder.glob("*.npz")) if folder.is_dir() else []
print(f"== {len(files)} failing check(s) kept", *(f.stem for f in files), sep="\n   ")
if files:
    room = 15 << 20
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            if f.stat().st_size <= room:
                z.write(f, f.name)
                room -= f.stat().st_size
            else:
                z.writestr(f.name + ".left-out.txt", f"{f.stat().st_size} bytes: over the 15 MB left")
EOF
echo "== done after ${SECONDS}s"
