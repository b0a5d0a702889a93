# SPDX-License-Identifier: Apache-2.0
"""Builds mpe_torch, the PyTorch extension of mpe (header-only C++20): mpe_torch._C (host
backend, g++) and, where it can, mpe_torch._C_cuda (mpe's CUDA backend, nvcc).

    pip install --no-build-isolation ./python      # in an environment that has torch

Needs: torch (its headers and the compiler flags of torch.utils.cpp_extension), g++ >= 11
(C++20), OpenMP, and the CCCL (Thrust/CUB) headers of the CUDA toolkit: found under
$CUDA_HOME/include/cccl, $CUDA_PATH/include/cccl or /usr/local/cuda/include/cccl, or given
by $MPE_CCCL_INCLUDE. mpe's own headers are read from ../include (this file's parent
repository), so build from a checkout. Parallel compilation: MAX_JOBS (default 2 here).

The CUDA module (mpe_torch._C_cuda) is built when torch has CUDA (torch.version.cuda) and nvcc
is found ($CUDA_HOME/bin/nvcc, torch's CUDA_HOME, /usr/local/cuda); no GPU is needed to build
it. MPE_TORCH_CUDA=0 skips it, MPE_TORCH_CUDA=1 requires it (an error when it cannot be
built). Architectures: TORCH_CUDA_ARCH_LIST (default 9.0: sm_90). Its .cu translation units
include no torch header; the combinations they compile are variants.hpp's is_built_cuda.

Warnings: -Wall -Wextra for g++ and nvcc's host compiler; MPE_TORCH_WERROR=1 makes every
warning an error (g++ -Werror, nvcc -Werror all-warnings and -Xcompiler -Werror): CI sets it.
"""
import glob
import os
import shlex
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
MPE_INCLUDE = os.path.join(os.path.dirname(HERE), "include")

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, include_paths
    from torch.utils.cpp_extension import CUDA_HOME as TORCH_CUDA_HOME
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

WERROR = os.environ.get("MPE_TORCH_WERROR", "0") not in ("", "0")
CXX_WARNINGS = ["-Wall", "-Wextra"] + (["-Werror"] if WERROR else [])

CSRC = os.path.join("mpe_torch", "csrc")
# The binding, the registry, mpe::TieredRows' binding and one translation unit per storage format (group_<storage>.cpp;
# FP32's and INT8's other cache policies in group_<storage>_caches.cpp), compiled in parallel.
SOURCES = [os.path.join(CSRC, f) for f in ("binding.cpp", "registry.cpp", "tiered_binding.cpp")] + sorted(
    os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, CSRC, "group_*.cpp")))


def system_includes(device_type):
    # torch's headers (and the CUDA toolkit's) as system headers (-isystem overrides their -I),
    # so -Wall -Wextra report our code only.
    return [f for p in include_paths(device_type) for f in ("-isystem", p)]


def find_nvcc():
    """The CUDA toolkit root holding bin/nvcc, or None."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), TORCH_CUDA_HOME, "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return root
    return None


def want_cuda():
    """Whether to build mpe_torch._C_cuda (MPE_TORCH_CUDA: 0 never, 1 always, unset when it can)."""
    mode = os.environ.get("MPE_TORCH_CUDA", "")
    if mode == "0":
        return False
    why = None
    if not torch.version.cuda:
        why = f"torch {torch.__version__} has no CUDA (torch.version.cuda is None)"
    elif find_nvcc() is None:
        why = "nvcc was not found (set CUDA_HOME to the CUDA toolkit)"
    if why is None:
        return True
    if mode == "1":
        sys.exit(f"mpe_torch: MPE_TORCH_CUDA=1 but the CUDA module cannot be built: {why}")
    print(f"mpe_torch: building the CPU module only: {why} (MPE_TORCH_CUDA=0 skips the CUDA module)")
    return False


CXX_FLAGS = ["-std=c++20", *OPT, "-g0", "-fopenmp", "-ffp-contract=off", *CXX_WARNINGS]
# -std=c++20 after torch's own -std=c++17 (the last one wins); -g0: no debug info (Python's own
# CFLAGS add -g).
extensions = [
    CppExtension(
        name="mpe_torch._C",
        sources=SOURCES,
        include_dirs=[MPE_INCLUDE, cccl_include()],
        extra_compile_args=CXX_FLAGS + system_includes("cpu"),
        extra_link_args=["-fopenmp"],
    )
]

if want_cuda():
    cuda_root = find_nvcc()
    os.environ.setdefault("CUDA_HOME", cuda_root)
    # torch would otherwise build for every architecture of its CUDA (no GPU to ask here).
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    # The CUDA module: the binding compiled again (cuda_binding.cpp: binding.cpp with
    # MPE_TORCH_CUDA), g++ with torch's CUDA headers; its registry (g++); one nvcc translation
    # unit per storage format (cuda_group_<storage>.cu, no torch headers).
    CUDA_SOURCES = [os.path.join(CSRC, f) for f in ("cuda_binding.cpp", "cuda_registry.cpp")] + sorted(
        os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, CSRC, "cuda_group_*.cu")))
    NVCC_FLAGS = [
        "-std=c++20", *OPT, "-fmad=false",  # no FMA contraction on the device: the host's bits
        # CUDAExtension hides the CUDA headers' half/bfloat16 operators and conversions (for
        # torch's own types); mpe's kernels are compiled as mpe's CUDA tests compile them.
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        "-Xcompiler", ",".join(["-fopenmp", "-ffp-contract=off", *CXX_WARNINGS]),
    ] + (["-Werror", "all-warnings"] if WERROR else [])
    extensions.append(
        CUDAExtension(
            name="mpe_torch._C_cuda",
            sources=CUDA_SOURCES,
            include_dirs=[MPE_INCLUDE, cccl_include()],
            extra_compile_args={"cxx": CXX_FLAGS + system_includes("cuda"), "nvcc": NVCC_FLAGS},
            extra_link_args=["-fopenmp"],
        ))

setup(
    name="mpe_torch",
    version="0.1.0",
    description="PyTorch TableBatchedEmbeddingBags over mpe's mixed-precision cached embeddings",
    packages=["mpe_torch"],
    package_data={"mpe_torch": ["csrc/*.hpp", "csrc/*.cpp", "csrc/*.cuh", "csrc/*.cu"]},
    python_requires=">=3.9",
    install_requires=["torch"],
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    zip_safe=False,
)
