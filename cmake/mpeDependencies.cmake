# SPDX-License-Identifier: Apache-2.0
# Dependencies of the mpe::mpe INTERFACE target, shared by the build tree and the
# installed package config: OpenMP (host backend) and the CCCL headers (Thrust, CUB,
# libcu++), which the CUDA toolkit ships under include/cccl.
#
# CCCL is found with its own CMake package (the toolkit ships it under lib64/cmake/cccl;
# hints: CUDAToolkit_ROOT, CUDA_HOME, CUDA_PATH, /usr/local/cuda), and mpe::cccl links its
# header-only targets Thrust::Thrust and CUB::CUB (include path only). CCCL::CCCL is not
# used: it brings CCCL::Thrust, whose default device system is CUDA, i.e. it would define
# THRUST_DEVICE_SYSTEM for every user; mpe's headers never define it (the host backend
# passes explicit thrust::omp::par / cpp::par policies, so plain g++ builds work).
# Without the package (older toolkits, a bare CCCL checkout), or with
# -DMPE_CCCL_INCLUDE_DIR=<dir holding thrust/ and cub/>, the headers are used directly.
# Either way the CCCL directories are system include directories (no warnings from them
# under -Wall -Wextra -Werror).
include(CMakeFindDependencyMacro)
find_dependency(OpenMP)
if(NOT TARGET mpe::cccl)
  add_library(mpe::cccl INTERFACE IMPORTED)
  if(NOT MPE_CCCL_INCLUDE_DIR)
    set(_mpe_cccl_hints "")
    foreach(_mpe_root IN ITEMS "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}"
                               /usr/local/cuda)
      if(_mpe_root)
        list(APPEND _mpe_cccl_hints "${_mpe_root}/lib64/cmake/cccl" "${_mpe_root}/lib/cmake/cccl")
      endif()
    endforeach()
    # CCCL's config creates CCCL::Thrust through option(CCCL_ENABLE_DEFAULT_THRUST_TARGET):
    # switched off (CMP0077 NEW lets the option take this variable in any caller).
    cmake_policy(PUSH)
    cmake_policy(SET CMP0077 NEW)
    set(CCCL_ENABLE_DEFAULT_THRUST_TARGET OFF)
    find_package(CCCL CONFIG QUIET COMPONENTS libcudacxx CUB Thrust HINTS ${_mpe_cccl_hints})
    unset(CCCL_ENABLE_DEFAULT_THRUST_TARGET)
    cmake_policy(POP)
  endif()
  if(NOT MPE_CCCL_INCLUDE_DIR AND CCCL_FOUND AND TARGET Thrust::Thrust AND TARGET CUB::CUB)
    set(_mpe_cccl_dirs "")
    foreach(_mpe_t IN ITEMS Thrust::Thrust CUB::CUB libcudacxx::libcudacxx)
      if(TARGET ${_mpe_t})
        get_target_property(_mpe_real ${_mpe_t} ALIASED_TARGET)
        if(NOT _mpe_real)
          set(_mpe_real ${_mpe_t})
        endif()
        get_target_property(_mpe_inc ${_mpe_real} INTERFACE_INCLUDE_DIRECTORIES)
        if(_mpe_inc)
          list(APPEND _mpe_cccl_dirs ${_mpe_inc})
        endif()
      endif()
    endforeach()
    list(REMOVE_DUPLICATES _mpe_cccl_dirs)
    set_target_properties(mpe::cccl PROPERTIES INTERFACE_LINK_LIBRARIES "Thrust::Thrust;CUB::CUB"
                                               INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${_mpe_cccl_dirs}")
    set(MPE_CCCL_SOURCE "CCCL ${CCCL_VERSION} package (${CCCL_DIR}); headers ${_mpe_cccl_dirs}")
  else()
    find_path(MPE_CCCL_INCLUDE_DIR thrust/version.h
      HINTS ${CUDAToolkit_ROOT} ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda
      PATH_SUFFIXES include/cccl include
      DOC "Directory holding thrust/ and cub/ (CCCL), e.g. /usr/local/cuda/include/cccl")
    if(NOT MPE_CCCL_INCLUDE_DIR)
      message(FATAL_ERROR "mpe: Thrust/CUB (CCCL) headers not found. Install the CUDA toolkit or set "
                          "-DMPE_CCCL_INCLUDE_DIR=/usr/local/cuda/include/cccl")
    endif()
    set_target_properties(mpe::cccl PROPERTIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${MPE_CCCL_INCLUDE_DIR}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${MPE_CCCL_INCLUDE_DIR}")
    set(MPE_CCCL_SOURCE "headers ${MPE_CCCL_INCLUDE_DIR}")
  endif()
  if(NOT mpe_FIND_QUIETLY)
    message(STATUS "mpe: CCCL from ${MPE_CCCL_SOURCE}")
  endif()
endif()
