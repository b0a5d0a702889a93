# SPDX-License-Identifier: Apache-2.0
# Install test (CTest `install_consumer`, run with cmake -P): configures mpe from scratch
# (a first configure, library only), installs it to a temporary prefix with
# `cmake --install`, then configures a consumer project from scratch with
# -DCMAKE_PREFIX_PATH=<prefix> and `find_package(mpe)`, builds it and runs it.
# Inputs: MPE_SOURCE_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER; optional
# CUDA_TOOLKIT_ROOT (passed on as CUDAToolkit_ROOT).
cmake_minimum_required(VERSION 3.25)
foreach(v MPE_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install test: -D${v}=... is required")
  endif()
endforeach()

set(build "${WORK_DIR}/mpe-build")
set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(common -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)
if(MAKE_PROGRAM)
  list(APPEND common -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CUDA_TOOLKIT_ROOT)
  list(APPEND common -DCUDAToolkit_ROOT=${CUDA_TOOLKIT_ROOT})
endif()

function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "install test: ${name}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${name} failed (${rc})")
  endif()
endfunction()

step("configure mpe (first configure)"
     ${CMAKE_COMMAND} -S "${MPE_SOURCE_DIR}" -B "${build}" ${common} -DMPE_BUILD_TESTS=OFF
     -DMPE_BUILD_BENCHMARKS=OFF -DMPE_BUILD_EXAMPLES=OFF -DMPE_ENABLE_CUDA=OFF)
step("install to ${prefix}" ${CMAKE_COMMAND} --install "${build}" --prefix "${prefix}")

# The exported target must carry the installed include directory.
file(GLOB_RECURSE targets_file "${prefix}/*/mpeTargets.cmake")
if(NOT targets_file)
  message(FATAL_ERROR "install test: no mpeTargets.cmake under ${prefix}")
endif()
file(READ "${targets_file}" targets)
if(NOT targets MATCHES "INTERFACE_INCLUDE_DIRECTORIES \"\\\${_IMPORT_PREFIX}/include\"")
  message(FATAL_ERROR "install test: ${targets_file} exports mpe::mpe without \${_IMPORT_PREFIX}/include:\n${targets}")
endif()
if(NOT EXISTS "${prefix}/include/mpe/mpe.hpp")
  message(FATAL_ERROR "install test: ${prefix}/include/mpe/mpe.hpp was not installed")
endif()

step("configure the consumer from scratch"
     ${CMAKE_COMMAND} -S "${CMAKE_CURRENT_LIST_DIR}/consumer" -B "${consumer_build}" ${common}
     -DCMAKE_PREFIX_PATH=${prefix})
step("build the consumer" ${CMAKE_COMMAND} --build "${consumer_build}" --config Release)
# single-config generators put it at the top, multi-config ones under Release/
set(exe "${consumer_build}/consumer")
if(NOT EXISTS "${exe}")
  set(exe "${consumer_build}/Release/consumer")
endif()
step("run the consumer" "${exe}")
