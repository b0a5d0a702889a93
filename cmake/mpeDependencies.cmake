# SPDX-License-Identifier: Apache-2.0
# Dependencies of the mpe::mpe INTERFACE target, shared by the build tree and the
# installed package config: OpenMP (host backend) and the CCCL headers (Thrust, CUB),
# which the CUDA toolkit ships under include/cccl.
include(CMakeFindDependencyMacro)
find_dependency(OpenMP)
if(NOT TARGET mpe::cccl)
  find_path(MPE_CCCL_INCLUDE_DIR thrust/version.h
    HINTS ${CUDAToolkit_ROOT} ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda
    PATH_SUFFIXES include/cccl include
    DOC "Directory holding thrust/ and cub/ (CCCL), e.g. /usr/local/cuda/include/cccl")
  if(NOT MPE_CCCL_INCLUDE_DIR)
    message(FATAL_ERROR "mpe: Thrust/CUB (CCCL) headers not found. Install the CUDA toolkit or set "
                        "-DMPE_CCCL_INCLUDE_DIR=/usr/local/cuda/include/cccl")
  endif()
  add_library(mpe::cccl INTERFACE IMPORTED)
  set_target_properties(mpe::cccl PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${MPE_CCCL_INCLUDE_DIR}"
                                             INTERFACE_INCLUDE_DIRECTORIES "${MPE_CCCL_INCLUDE_DIR}")
endif()
