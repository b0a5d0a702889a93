# SPDX-License-Identifier: Apache-2.0
# Builds every target (host tests, examples, benchmarks and, when nvcc is present, the
# CUDA tests) and runs the test suite:   cmake -P cmake/test.cmake
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")
# The CUDA bit-identity tests for Int8Rowwise, Int4Rowwise, the state precisions and the
# core (every policy) are built; the Fp32/Fp16/Fp8 ones add ~5 min of nvcc and g++ on two
# cores and are left to `cmake --preset cuda-full` (run them on a machine with a GPU).
# -DMPE_BENCH_OPT_FLAGS=... (CI: -O1; a list: "-O1;-g0") is passed on to the build
# (CMakeLists.txt); without it the benchmarks get the build type's flags again, whatever an
# earlier run left in build/'s cache.
if(NOT DEFINED MPE_BENCH_OPT_FLAGS)
  set(MPE_BENCH_OPT_FLAGS "")
endif()
string(REPLACE ";" "\\;" bench_opt "${MPE_BENCH_OPT_FLAGS}")
mpe_configure(-DMPE_CUDA_FULL_MATRIX=OFF "-DMPE_BENCH_OPT_FLAGS=${bench_opt}")
mpe_jobs(jobs)
execute_process(COMMAND ${CMAKE_COMMAND} --build "${MPE_BUILD_DIR}" -j ${jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: build failed")
endif()
# Passive OpenMP waiting: CTest runs several multi-threaded tests at once on few cores.
execute_process(COMMAND ${CMAKE_COMMAND} -E env OMP_WAIT_POLICY=passive ${CMAKE_CTEST_COMMAND} --test-dir "${MPE_BUILD_DIR}" --output-on-failure -j ${jobs}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: tests failed")
endif()
# The PyTorch extension's tests, when a Python with torch is found (cmake/test_python.cmake);
# -DMPE_SKIP_PYTHON=ON skips them (CI runs them separately once its environment is ready).
if(NOT MPE_SKIP_PYTHON)
  include("${CMAKE_CURRENT_LIST_DIR}/test_python.cmake")
endif()
