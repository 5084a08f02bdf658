#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with an NVIDIA driver, from the repo root:
#     bash tests/gpu/run_all.sh [DIR]        (DIR defaults to $OUT, else /tmp/gpu-figures)
# The VRAM agreement runs first, on a GPU no test has touched yet.
# Writes DIR/diag.json (the machine), DIR/{vram,adapter,status}.json (the figures each test recorded),
# DIR/pytest.log and DIR/summary.md (tables built from them). Exit status: pytest's.
# Wheels in ${GPU_WHEELS:-.whl}/ (wgpu, cffi, pycparser, rendercanvas for the Vulkan stand-in; moderngl,
# glcontext for the OpenGL holder; asyncssh and its needs for the `status --json` CLI test) are installed
# into /tmp/gpu-site first when present. The Vulkan loader and the GL/EGL dispatch libraries must be on
# the machine (README, GPU section, says how they were carried); the driver's ICD and EGL vendor files are
# looked up in the usual places when VK_DRIVER_FILES / __EGL_VENDOR_LIBRARY_FILENAMES are unset.
set -uo pipefail
cd "$(dirname "$0")/../.."
DIR="${1:-${OUT:-/tmp/gpu-figures}}"
mkdir -p "$DIR"
PY="${PYTHON:-python3}"
WHL="${GPU_WHEELS:-.whl}"
if compgen -G "$WHL/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-site "$WHL"/*.whl \
        && export PYTHONPATH="/tmp/gpu-site${PYTHONPATH:+:$PYTHONPATH}"
fi
first() { for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; }
ICD_DIRS=(/usr/share/vulkan/icd.d /etc/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d)
EGL_DIRS=(/usr/share/glvnd/egl_vendor.d /etc/glvnd/egl_vendor.d /usr/local/nvidia/share/glvnd/egl_vendor.d)
: "${VK_DRIVER_FILES:=$(first "${ICD_DIRS[@]/%//nvidia_icd.json}")}"
: "${__EGL_VENDOR_LIBRARY_FILENAMES:=$(first "${EGL_DIRS[@]/%//10_nvidia.json}")}"
export VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GPU_FIGURES_DIR="$DIR"
{ nvidia-smi; "$PY" -c 'import torch; print("torch", torch.__version__, "devices", torch.cuda.device_count())'
  echo "VK_DRIVER_FILES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=$__EGL_VENDOR_LIBRARY_FILENAMES"
  ldconfig -p | grep -E 'libvulkan\.so|libEGL\.so|libGLdispatch' || echo "no Vulkan loader / EGL dispatch in ldconfig"; } \
    >"$DIR/pytest.log" 2>&1
"$PY" tests/gpu/diag.py >"$DIR/diag.json" 2>>"$DIR/pytest.log"
# shellcheck disable=SC2086  # GPU_TESTS: a space-separated list of test files (default: all four)
"$PY" -m pytest ${GPU_TESTS:-tests/gpu/test_gpu_vram.py tests/gpu/test_gpu_vulkan.py tests/gpu/test_gpu_adapter.py tests/gpu/test_gpu_status.py} -v -rA -p no:cacheprovider 2>&1 | tee -a "$DIR/pytest.log"
rc=${PIPESTATUS[0]}
"$PY" tests/gpu/summary.py "$DIR" >"$DIR/summary.md"
exit "$rc"
