# SPDX-License-Identifier: Apache-2.0
# Shared by cmake/quickstart.cmake and cmake/test.cmake (run with `cmake -P`): installs the
# Debian packages a command needs (when root), or stops with the exact command to run; then
# configures the build tree `build/` (Release, Ninja when present).
cmake_minimum_required(VERSION 3.25)
get_filename_component(MPE_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(MPE_BUILD_DIR "${MPE_SOURCE_DIR}/build")

# The main job (train_dlrm; OpenMP comes with g++): cmake/quickstart.cmake installs only these.
# train_dlrm --plot also needs gnuplot (gnuplot-nox) at run time.
set(MPE_MAIN_PACKAGES g++ ninja-build libeigen3-dev libcli11-dev nlohmann-json3-dev)
# Everything cmake/test.cmake builds and runs besides: doctest and Google Benchmark, OpenMPI
# (the sharded tests), doxygen (the docs test), Python's venv and headers (the PyTorch
# extension's environment and build).
set(MPE_TEST_PACKAGES ${MPE_MAIN_PACKAGES} doctest-dev libbenchmark-dev libopenmpi-dev openmpi-bin doxygen
                      python3-venv python3-dev)
set(MPE_DEBIAN_PACKAGES ${MPE_TEST_PACKAGES})

# Installs the packages of MPE_DEBIAN_PACKAGES that are missing (set it to
# MPE_MAIN_PACKAGES before calling mpe_configure for the main job's set).
function(mpe_install_missing)
  find_program(DPKG dpkg-query)
  if(NOT DPKG)
    message(STATUS "mpe: not a Debian system; make sure these are installed: ${MPE_DEBIAN_PACKAGES}")
    return()
  endif()
  set(missing "")
  foreach(pkg ${MPE_DEBIAN_PACKAGES})
    execute_process(COMMAND ${DPKG} -W -f=\${Status} ${pkg} OUTPUT_VARIABLE st ERROR_QUIET)
    if(NOT st MATCHES "install ok installed")
      list(APPEND missing ${pkg})
    endif()
  endforeach()
  if(missing)
    string(REPLACE ";" " " missing_str "${missing}")
    execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT uid STREQUAL "0")
      message(FATAL_ERROR "mpe: missing Debian packages. Run:\n  sudo apt-get install -y ${missing_str}\nthen run this command again.")
    endif()
    message(STATUS "mpe: installing ${missing_str}")
    execute_process(COMMAND apt-get update -q RESULT_VARIABLE rc)
    execute_process(COMMAND env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${missing} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "mpe: apt-get install failed. Run: apt-get install -y ${missing_str}")
    endif()
  endif()
endfunction()

function(mpe_check_cuda_toolkit)
  set(candidates "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" /usr/local/cuda)
  foreach(c ${candidates})
    if(c AND EXISTS "${c}/include/cccl/thrust/version.h")
      set(MPE_CUDA_ROOT "${c}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "mpe: the CUDA toolkit (for its Thrust/CUB headers under include/cccl) was not found. "
                      "Install NVIDIA's CUDA toolkit 12.x/13.x (e.g. apt-get install cuda-toolkit-13-0 from NVIDIA's "
                      "Debian repository) and set CUDA_HOME=/usr/local/cuda, then run this command again.")
endfunction()

function(mpe_configure)
  mpe_install_missing()
  mpe_check_cuda_toolkit()
  set(gen "")
  find_program(NINJA ninja)
  if(NINJA)
    set(gen -G Ninja)
  endif()
  if(EXISTS "${MPE_BUILD_DIR}/CMakeCache.txt")
    set(gen "")
  endif()
  set(nvcc "")
  if(EXISTS "${MPE_CUDA_ROOT}/bin/nvcc" AND NOT "-DMPE_ENABLE_CUDA=OFF" IN_LIST ARGN)
    set(nvcc "-DCMAKE_CUDA_COMPILER=${MPE_CUDA_ROOT}/bin/nvcc")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${MPE_SOURCE_DIR}" -B "${MPE_BUILD_DIR}" ${gen}
                          -DCMAKE_BUILD_TYPE=Release ${nvcc} ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpe: configuring failed (see above)")
  endif()
endfunction()

function(mpe_jobs out)
  cmake_host_system_information(RESULT n QUERY NUMBER_OF_PHYSICAL_CORES)
  if(n LESS 1)
    set(n 1)
  endif()
  set(${out} ${n} PARENT_SCOPE)
endfunction()
