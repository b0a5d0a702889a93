# SPDX-License-Identifier: Apache-2.0
"""The example and benchmark scripts check their dependencies at start: a missing one is one
line on stderr naming it and its install command (one line each when several are missing), and
exit status 2, not a traceback. Each run hides one or two packages from a fresh Python (``sys.modules[name] = None``, which import machinery
reads as absent) and runs the script as ``__main__``; nothing heavy is imported first."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = """import runpy, sys
for name in sys.argv[2].split(","):
    sys.modules[name] = None
script = sys.argv[1]
sys.argv = [script] + sys.argv[3:]
runpy.run_path(script, run_name="__main__")
"""


@pytest.mark.parametrize("script, hidden, args, named, install", [
    ("python/examples/torch_dlrm.py", "torch", [], "the Python package torch", "pip install torch=="),
    ("python/examples/torch_dlrm.py", "mpe_torch", [], "the Python package mpe_torch",
     "pip install --no-build-isolation ./python"),
    ("python/examples/torch_dlrm.py", "fbgemm_gpu", ["--emb", "fbgemm"],
     r"the Python package fbgemm_gpu is not installed \(needed for --emb fbgemm\)",
     "pip install fbgemm-gpu-cpu==1.9.*"),
    ("python/examples/torchrec_dlrm.py", "torchrec", [], "the Python package torchrec",
     "pip install --no-deps torchrec==1.9.2 "),
    ("python/examples/torchrec_dlrm.py", "mpe_torch", ["--kernel", "mpe"],
     r"mpe_torch is not installed \(needed for --kernel mpe\)", "./python"),
    ("bench/torch_step/step_side_by_side.py", "fbgemm_gpu", [], "the Python package fbgemm_gpu",
     "pip install fbgemm-gpu-cpu==1.9.*"),
    ("bench/torch_step/gpu_step.py", "mpe_torch", [], "the Python package mpe_torch", "./python"),
    ("bench/torch_step/dmp_step.py", "torchrec", [], "the Python package torchrec", "pip install --no-deps torchrec"),
    ("bench/torch_step/dmp_step.py", "fbgemm_gpu,torchrec", [], "the Python package fbgemm_gpu", "fbgemm-gpu-cpu"),
    ("bench/torch_step/dmp_step.py", "torchrec,fbgemm_gpu", [], "the Python package fbgemm_gpu", "fbgemm-gpu-cpu"),
])
def test_each_missing_dependency_is_one_line_and_status_2(script, hidden, args, named, install):
    import re
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([sys.executable, "-c", RUN, os.path.join(REPO, script), hidden, *args], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    # One line per hidden package, in the script's order of require() (every one named at once).
    lines = r.stderr.strip().splitlines()
    assert len(lines) == len(hidden.split(",")) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert re.search(named, lines[0]) and install in lines[0], lines[0]
    for hid, line in zip(sorted(hidden.split(",")), lines):
        assert line.startswith(os.path.basename(script) + ": ") and f"package {hid} " in line, line


def test_every_script_says_what_it_needs():
    for script in ("python/examples/torch_dlrm.py", "python/examples/torchrec_dlrm.py",
                   "bench/torch_step/step_side_by_side.py", "bench/torch_step/dmp_step.py",
                   "bench/torch_step/gpu_step.py"):
        with open(os.path.join(REPO, script)) as f:
            text = f.read()
        doc = text.split('"""')[1]
        assert "\nNeeds: " in doc, script
        assert "require(" in text, script
