#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with an NVIDIA driver, from the repo root:
#     bash tests/gpu/run_all.sh [DIR]        (DIR defaults to $OUT, else /tmp/gpu-figures)
# The VRAM agreement runs first, on a GPU no test has touched yet.
# Writes DIR/diag.json (the machine), DIR/{vram,adapter,status}.json (the figures each test recorded),
# DIR/pytest.log and DIR/summary.md (tables built from them). Exit status: pytest's.
# Wheels in .whl/ (asyncssh and its needs, for the `status --json` CLI test) are installed into
# /tmp/gpu-site first when present; nothing else is installed.
set -uo pipefail
cd "$(dirname "$0")/../.."
DIR="${1:-${OUT:-/tmp/gpu-figures}}"
mkdir -p "$DIR"
PY="${PYTHON:-python3}"
if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site .whl/*.whl \
        && export PYTHONPATH="/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GPU_FIGURES_DIR="$DIR"
{ nvidia-smi; "$PY" -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'; } \
    >"$DIR/pytest.log" 2>&1
"$PY" tests/gpu/diag.py >"$DIR/diag.json" 2>>"$DIR/pytest.log"
# shellcheck disable=SC2086  # GPU_TESTS: a space-separated list of test files (default: all three)
"$PY" -m pytest ${GPU_TESTS:-tests/gpu/test_gpu_vram.py tests/gpu/test_gpu_adapter.py tests/gpu/test_gpu_status.py} -v -rA -p no:cacheprovider 2>&1 | tee -a "$DIR/pytest.log"
rc=${PIPESTATUS[0]}
"$PY" tests/gpu/summary.py "$DIR" >"$DIR/summary.md"
exit "$rc"
