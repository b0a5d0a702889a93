# SPDX-License-Identifier: Apache-2.0
# Builds the PyTorch extension (python/, mpe_torch) and runs its pytest suite, when a Python
# with torch is available:   cmake [-DMPE_PYTHON=/path/to/python] -P cmake/test_python.cmake
# Python: -DMPE_PYTHON, else $MPE_PYTHON, else python3. Without torch it says so and stops
# (not an error). The extension is built in python/build (incremental) and installed into
# build/python-site (nothing is installed into the Python environment itself).
cmake_minimum_required(VERSION 3.25)
get_filename_component(MPE_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(NOT MPE_PYTHON)
  if(DEFINED ENV{MPE_PYTHON})
    set(MPE_PYTHON "$ENV{MPE_PYTHON}")
  else()
    find_program(MPE_PYTHON python3)
  endif()
endif()
if(NOT MPE_PYTHON)
  message(STATUS "mpe_torch: no python3 found; PyTorch extension tests skipped")
  return()
endif()
execute_process(COMMAND "${MPE_PYTHON}" -c "import torch, pytest; print(torch.__version__)"
                RESULT_VARIABLE rc OUTPUT_VARIABLE torch_version OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(STATUS "mpe_torch: ${MPE_PYTHON} cannot import torch and pytest; PyTorch extension tests skipped "
                 "(python/ci_venv.sh creates an environment with both)")
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
# setuptools rebuilds an object only when its .cpp changed: when any header (mpe's or the
# extension's) is newer than the built module, drop the objects so everything recompiles.
file(GLOB built_so "${site}/mpe_torch/_C*.so")
if(built_so)
  file(GLOB_RECURSE headers "${MPE_SOURCE_DIR}/include/*.hpp" "${MPE_SOURCE_DIR}/include/*.inl"
       "${MPE_SOURCE_DIR}/python/mpe_torch/csrc/*.hpp")
  foreach(h ${headers})
    if("${h}" IS_NEWER_THAN "${built_so}")
      message(STATUS "mpe_torch: ${h} changed since the last build; rebuilding every object")
      file(GLOB stale_objects LIST_DIRECTORIES true "${MPE_SOURCE_DIR}/python/build/temp*")
      file(REMOVE_RECURSE ${stale_objects})
      break()
    endif()
  endforeach()
endif()
execute_process(COMMAND "${MPE_PYTHON}" -m pip install -q --no-build-isolation --no-deps --upgrade
                        --target "${site}" "${MPE_SOURCE_DIR}/python"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe_torch: building the extension failed")
endif()
string(TIMESTAMP t1 "%s")
math(EXPR dt "${t1} - ${t0}")
message(STATUS "mpe_torch: extension built in ${dt} s; running pytest")
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PYTHONPATH=${site}" OMP_WAIT_POLICY=passive
                        "${MPE_PYTHON}" -m pytest -q -p no:cacheprovider "${MPE_SOURCE_DIR}/python/tests"
                WORKING_DIRECTORY "${MPE_SOURCE_DIR}/python/tests"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe_torch: pytest failed (exit ${rc})")
endif()
