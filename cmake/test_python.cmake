# SPDX-License-Identifier: Apache-2.0
# Builds the PyTorch extension (python/, mpe_torch) and runs its pytest suite:
#   cmake [-DMPE_PYTHON=/path/to/python] -P cmake/test_python.cmake
# Python: -DMPE_PYTHON, else $MPE_PYTHON (either must import torch and pytest), else python3
# when it imports both, else the environment python/ci_venv.sh makes in build/python-venv
# (torch 2.14, fbgemm-gpu-cpu 1.9, torchrec 1.9.2, pytest: ~3 GB of wheels on its first run).
# The extension is built in python/build (incremental) and installed into build/python-site
# (nothing is installed into the Python environment itself). Included by cmake/test.cmake,
# it leaves MPE_PYTHON_SKIPPED (why the tests did not run, empty when they ran) and
# MPE_PYTEST_COUNTS (pytest's counts) for its summary.
cmake_minimum_required(VERSION 3.25)
get_filename_component(MPE_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
include("${CMAKE_CURRENT_LIST_DIR}/junit_counts.cmake")
set(MPE_PYTHON_SKIPPED "")
set(MPE_PYTEST_COUNTS "")

function(mpe_python_has_torch py out)
  execute_process(COMMAND "${py}" -c "import torch, pytest; print(torch.__version__)"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE v OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(${out} "${v}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Finds the Python to test with; sets torch_version, or MPE_PYTHON_SKIPPED and returns.
macro(mpe_find_test_python)
  if(NOT MPE_PYTHON AND DEFINED ENV{MPE_PYTHON})
    set(MPE_PYTHON "$ENV{MPE_PYTHON}")
  endif()
  if(MPE_PYTHON)
    mpe_python_has_torch("${MPE_PYTHON}" torch_version)
    if(NOT torch_version)
      message(FATAL_ERROR "mpe_torch: MPE_PYTHON=${MPE_PYTHON} cannot import torch and pytest "
                          "(python/ci_venv.sh makes an environment with both; or leave MPE_PYTHON unset "
                          "and this command makes one in build/python-venv)")
    endif()
  else()
    find_program(mpe_python3 python3)
    set(torch_version "")
    if(mpe_python3)
      mpe_python_has_torch("${mpe_python3}" torch_version)
    endif()
    if(torch_version)
      set(MPE_PYTHON "${mpe_python3}")
    elseif(NOT mpe_python3)
      set(MPE_PYTHON_SKIPPED "no python3 found (Debian: apt-get install python3 python3-venv python3-dev)")
    else()
      set(venv "${MPE_SOURCE_DIR}/build/python-venv")
      message(STATUS "mpe_torch: ${mpe_python3} cannot import torch and pytest; making the test environment "
                     "${venv} with python/ci_venv.sh (the first time: ~3 GB of wheels, a few minutes)")
      execute_process(COMMAND ${CMAKE_COMMAND} -E env "MPE_BASE_PYTHON=${mpe_python3}"
                              bash "${MPE_SOURCE_DIR}/python/ci_venv.sh" "${venv}"
                      RESULT_VARIABLE rc OUTPUT_VARIABLE venv_out OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT rc EQUAL 0)
        set(MPE_PYTHON_SKIPPED "python/ci_venv.sh could not make ${venv} (exit ${rc}, its messages above); "
                               "rerun when PyPI is reachable, or pass -DMPE_PYTHON=<a python with torch and pytest>")
      else()
        string(REGEX REPLACE ".*\n" "" MPE_PYTHON "${venv_out}")
        mpe_python_has_torch("${MPE_PYTHON}" torch_version)
      endif()
    endif()
  endif()
endmacro()

mpe_find_test_python()
if(MPE_PYTHON_SKIPPED)
  message(WARNING "mpe_torch: PyTorch extension tests skipped: ${MPE_PYTHON_SKIPPED}")
  return()
endif()
message(STATUS "mpe_torch: building the extension against torch ${torch_version} (${MPE_PYTHON})")
set(site "${MPE_SOURCE_DIR}/build/python-site")
string(TIMESTAMP t0 "%s")
if(NOT DEFINED ENV{MAX_JOBS})
  set(ENV{MAX_JOBS} 2)
endif()
# The optimization level (MPE_TORCH_OPT, python/setup.py; -O3 when unset): setuptools does
# not rebuild for changed flags, so a level other than the last build's drops python/build
# (objects and module) and the installed module.
set(opt "$ENV{MPE_TORCH_OPT}")
if(opt STREQUAL "")
  set(opt "-O3")
endif()
set(ENV{MPE_TORCH_OPT} "${opt}")  # what setup.py builds with is what the stamp records
set(opt_stamp "${MPE_SOURCE_DIR}/python/build/mpe_torch_opt.txt")
set(last_opt "")
if(EXISTS "${opt_stamp}")
  file(READ "${opt_stamp}" last_opt)
endif()
if(NOT last_opt STREQUAL opt)
  if(EXISTS "${MPE_SOURCE_DIR}/python/build")
    message(STATUS "mpe_torch: optimization ${opt} (last build: '${last_opt}'); rebuilding every object")
  endif()
  file(REMOVE_RECURSE "${MPE_SOURCE_DIR}/python/build")
  file(GLOB old_so "${site}/mpe_torch/_C*.so")
  if(old_so)
    file(REMOVE ${old_so})
  endif()
  file(WRITE "${opt_stamp}" "${opt}")
endif()
# setuptools rebuilds an object only when its .cpp / .cu changed: when any header (mpe's or the
# extension's) is newer than the built CPU module (_C; the CUDA module, _C_cuda, is built after
# it), drop the objects so everything recompiles.
file(GLOB built_so "${site}/mpe_torch/_C.*.so")
if(built_so)
  file(GLOB_RECURSE headers "${MPE_SOURCE_DIR}/include/*.hpp" "${MPE_SOURCE_DIR}/include/*.inl"
       "${MPE_SOURCE_DIR}/include/*.cuh" "${MPE_SOURCE_DIR}/python/mpe_torch/csrc/*.hpp"
       "${MPE_SOURCE_DIR}/python/mpe_torch/csrc/*.cuh")
  foreach(h ${headers})
    if("${h}" IS_NEWER_THAN "${built_so}")
      message(STATUS "mpe_torch: ${h} changed since the last build; rebuilding every object")
      file(GLOB stale_objects LIST_DIRECTORIES true "${MPE_SOURCE_DIR}/python/build/temp*")
      file(REMOVE_RECURSE ${stale_objects})
      break()
    endif()
  endforeach()
endif()
# The build's progress: pip -v passes on ninja's "[k/N] c++ ... -c <file>.cpp" (and nvcc's
# <file>.cu) lines, shown as "[k/N] <file>.cpp"; compiler errors and warnings pass through whole.
# The CUDA module (mpe_torch._C_cuda: cuda_*.cpp, cuda_group_*.cu) is built where torch has CUDA
# and nvcc is found (python/setup.py; MPE_TORCH_CUDA=0 skips it).
file(GLOB mpe_torch_sources "${MPE_SOURCE_DIR}/python/mpe_torch/csrc/*.cpp"
     "${MPE_SOURCE_DIR}/python/mpe_torch/csrc/*.cu")
list(LENGTH mpe_torch_sources n_sources)
message(STATUS "mpe_torch: building up to ${n_sources} translation units (those out of date) at ${opt} with MAX_JOBS=$ENV{MAX_JOBS} "
               "(from scratch at -O1: ~5 CPU-minutes, and ~3 more for the CUDA module; at -O3 about twice that)")
# (pip -v writes the build's output to stderr: sh joins it to stdout for the filter.)
execute_process(COMMAND sh -c "exec \"$@\" 2>&1" sh "${MPE_PYTHON}" -m pip install -v --no-build-isolation --no-deps
                        --upgrade --target "${site}" "${MPE_SOURCE_DIR}/python"
                COMMAND sed -u -n -E -e "/byte-compiling is disabled/d" -e "s#^ *(\\[[0-9]+/[0-9]+\\]) .* -c ([^ ]*/)?([^ /]+[.](cpp|cu)) .*#  \\1 \\3#p"
                                     -e "/(error|warning|Error|FAILED)/p"
                RESULTS_VARIABLE rcs)
list(GET rcs 0 rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe_torch: building the extension failed (exit ${rc}; the compiler's messages are above)")
endif()
string(TIMESTAMP t1 "%s")
math(EXPR dt "${t1} - ${t0}")
message(STATUS "mpe_torch: extension built in ${dt} s; running pytest (2 - 6 minutes on 2 cores)")
set(junit "${MPE_SOURCE_DIR}/build/pytest-junit.xml")
file(REMOVE "${junit}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${site}" OMP_WAIT_POLICY=passive
                        "${MPE_PYTHON}" -m pytest -q -p no:cacheprovider "--junitxml=${junit}" "${MPE_SOURCE_DIR}/python/tests"
                WORKING_DIRECTORY "${MPE_SOURCE_DIR}/python/tests"
                RESULT_VARIABLE rc)
mpe_junit_counts("${junit}" MPE_PYTEST_COUNTS)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe_torch: pytest failed (exit ${rc}; ${MPE_PYTEST_COUNTS})")
endif()
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  message(STATUS "mpe_torch: pytest ${MPE_PYTEST_COUNTS} (torch ${torch_version}, ${MPE_PYTHON})")
endif()
