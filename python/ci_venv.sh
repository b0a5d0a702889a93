#!/usr/bin/env bash
# Creates (or reuses) the Python environment the mpe_torch tests run in: a virtual
# environment with torch 2.14.x and fbgemm-gpu-cpu 1.9.x (the pair fbgemm_gpu 1.9 is built
# for), torchrec 1.9.2 (installed with --no-deps: its declared dependencies pull a CUDA
# fbgemm_gpu; the pure-Python ones it imports are named below), numpy and pytest. Prints the
# environment's python on the last line of stdout.
#   python/ci_venv.sh [VENV_DIR]      (default: $MPE_VENV or /opt/mpe-venv)
# torch comes from PyPI (its Linux wheel pulls the CUDA runtime libraries, ~3 GB; the CPU
# wheel index is used first when it is reachable). Nothing is done when the environment
# already has the right versions.
set -euo pipefail
VENV="${1:-${MPE_VENV:-/opt/mpe-venv}}"
PY_BASE="${MPE_BASE_PYTHON:-python3}"
check() {
  [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - <<'PY' >/dev/null 2>&1
import torch, fbgemm_gpu, pytest, numpy, torchrec
assert torch.__version__.startswith("2.14."), torch.__version__
assert fbgemm_gpu.__version__.startswith("1.9."), fbgemm_gpu.__version__
assert torchrec.__version__ == "1.9.2", torchrec.__version__
PY
}
if check; then
  echo "mpe_torch: reusing $VENV" >&2
else
  start=$(date +%s)
  echo "mpe_torch: creating $VENV (torch 2.14.x, fbgemm-gpu-cpu 1.9.x, torchrec 1.9.2)" >&2
  "$PY_BASE" -m venv "$VENV"
  if "$VENV/bin/python" -m pip install -q --index-url https://download.pytorch.org/whl/cpu 'torch==2.14.*' >&2 2>/dev/null; then
    echo "mpe_torch: torch from the CPU wheel index" >&2
  else
    echo "mpe_torch: CPU wheel index unreachable; torch from PyPI" >&2
  fi
  "$VENV/bin/python" -m pip install -q 'torch==2.14.*' 'fbgemm-gpu-cpu==1.9.*' numpy pytest >&2
  "$VENV/bin/python" -m pip install -q --no-deps 'torchrec==1.9.2' 'tensordict==0.15.3' 'pyvers==0.2.3' \
    'cloudpickle==3.1.3' 'pyre-extensions==0.0.32' 'typing-inspect==0.9.0' 'mypy-extensions==1.2.0' >&2
  check || { echo "mpe_torch: $VENV does not import torch 2.14 / fbgemm_gpu 1.9 / torchrec 1.9.2 after installing" >&2; exit 1; }
  echo "mpe_torch: environment created in $(( $(date +%s) - start )) s" >&2
fi
echo "$VENV/bin/python"
