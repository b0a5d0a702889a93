# SPDX-License-Identifier: Apache-2.0
"""Builds mpe_torch, the PyTorch extension of mpe (header-only C++20, host backend).

    pip install --no-build-isolation ./python      # in an environment that has torch

Needs: torch (its headers and the compiler flags of torch.utils.cpp_extension), g++ >= 11
(C++20), OpenMP, and the CCCL (Thrust/CUB) headers of the CUDA toolkit: found under
$CUDA_HOME/include/cccl, $CUDA_PATH/include/cccl or /usr/local/cuda/include/cccl, or given
by $MPE_CCCL_INCLUDE. mpe's own headers are read from ../include (this file's parent
repository), so build from a checkout. Parallel compilation: MAX_JOBS (default 2 here).
"""
import glob
import os
import shlex
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
MPE_INCLUDE = os.path.join(os.path.dirname(HERE), "include")

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths
except ImportError:  # build isolation hides the environment's torch
    sys.exit("mpe_torch: torch is not importable in the build environment. Install torch first, then run "
             "`pip install --no-build-isolation ./python` (the extension must be built against the torch it "
             "runs with).")


def cccl_include():
    env = os.environ.get("MPE_CCCL_INCLUDE")
    if env:
        return env
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "include", "cccl", "thrust", "version.h")):
            return os.path.join(root, "include", "cccl")
    sys.exit("mpe_torch: the CCCL (Thrust/CUB) headers were not found; install the CUDA toolkit (no GPU needed) "
             "and set CUDA_HOME, or set MPE_CCCL_INCLUDE to the folder holding thrust/ and cub/.")


if not os.path.exists(os.path.join(MPE_INCLUDE, "mpe", "mpe.hpp")):
    sys.exit("mpe_torch: mpe's headers were not found at " + MPE_INCLUDE + "; build from an mpe checkout.")

os.environ.setdefault("MAX_JOBS", "2")
# Optimization level: -O3 unless MPE_TORCH_OPT says otherwise (.ci/run builds its test copy
# at -O1: the tests check values, and -ffp-contract=off gives the same bits at every level).
OPT = shlex.split(os.environ.get("MPE_TORCH_OPT") or "-O3")

CSRC = os.path.join("mpe_torch", "csrc")
# The binding, the registry and one translation unit per storage format (group_<storage>.cpp;
# FP32's and INT8's other cache policies in group_<storage>_caches.cpp), compiled in parallel.
SOURCES = [os.path.join(CSRC, f) for f in ("binding.cpp", "registry.cpp")] + sorted(
    os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, CSRC, "group_*.cpp")))

setup(
    name="mpe_torch",
    version="0.1.0",
    description="PyTorch TableBatchedEmbeddingBags over mpe's mixed-precision cached embeddings",
    packages=["mpe_torch"],
    package_data={"mpe_torch": ["csrc/*.hpp", "csrc/*.cpp"]},
    python_requires=">=3.9",
    install_requires=["torch"],
    ext_modules=[
        CppExtension(
            name="mpe_torch._C",
            sources=SOURCES,
            include_dirs=[MPE_INCLUDE, cccl_include()],
            # -std=c++20 after torch's own -std=c++17 (the last one wins); torch's headers as
            # system headers (-isystem overrides their -I), so -Wall -Wextra report our code only;
            # -g0: no debug info (Python's own CFLAGS add -g).
            extra_compile_args=["-std=c++20", *OPT, "-g0", "-fopenmp", "-ffp-contract=off", "-Wall", "-Wextra"]
            + [f for p in include_paths() for f in ("-isystem", p)],
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    zip_safe=False,
)
