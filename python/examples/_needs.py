# SPDX-License-Identifier: Apache-2.0
"""The dependency check of the examples and of bench/torch_step: ``require("torch", "fbgemm_gpu")``
prints one line for each dependency that is missing, naming it and the command that installs
it, then exits with status 2, instead of a traceback from deep inside the script.

It looks without importing (importlib's ``find_spec``; for mpe_torch also its compiled
extension, for Eigen its headers), so calling it loads nothing: torch's OpenMP runtime reads
OMP_WAIT_POLICY when torch is first imported, after the scripts set it. A package that is
present but fails to import (say, an extension built against another torch) still raises
its own error when the script imports it.
"""
import glob
import importlib.machinery
import importlib.util
import os
import sys

# What each name needs and the command that installs it (python/README.md, "Install").
INSTALL = {
    "torch": "pip install torch==2.14.*",
    "fbgemm_gpu": "pip install fbgemm-gpu-cpu==1.9.*",
    "torchrec": ("pip install --no-deps torchrec==1.9.2 tensordict==0.15.3 pyvers==0.2.3 cloudpickle==3.1.3 "
                 "pyre-extensions==0.0.32 typing-inspect==0.9.0 mypy-extensions==1.2.0"),
    "mpe_torch": ("pip install --no-build-isolation ./python (from the repository root), or "
                  "PYTHONPATH=build/python-site after cmake -P cmake/test_python.cmake"),
    "eigen": "apt-get install libeigen3-dev",
}
EIGEN = "/usr/include/eigen3"  # where the data helper (torch_dlrm.py) reads Eigen's headers


def missing(name):
    """What is missing of ``name`` (a key of INSTALL), or None when it is present."""
    if name == "eigen":
        if os.path.exists(os.path.join(EIGEN, "Eigen", "Core")):
            return None
        return f"Eigen's headers ({EIGEN}) are not installed"
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return f"the Python package {name} is not installed"
    if name == "mpe_torch":
        folders = list(spec.submodule_search_locations or [])
        if not any(glob.glob(os.path.join(d, "_C" + s)) for d in folders
                   for s in importlib.machinery.EXTENSION_SUFFIXES):
            return f"mpe_torch in {', '.join(folders)} has no compiled extension (_C): it is not built"
    return None


def require(*names, why=""):
    """Exits with status 2 if any of ``names`` (keys of INSTALL) is missing, after one line on
    stderr for each missing one (all of them, in order); ``why`` says what needs them (e.g.
    "--emb fbgemm")."""
    script = os.path.basename(sys.argv[0]) or "this script"
    need = f" (needed for {why})" if why else ""
    lines = [f"{script}: {what}{need}; to install: {INSTALL[name]}"
             for name in names if (what := missing(name)) is not None]
    if lines:
        print("\n".join(lines), file=sys.stderr)
        sys.exit(2)
