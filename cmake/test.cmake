# SPDX-License-Identifier: Apache-2.0
# Builds every target (host tests, examples, benchmarks and, when nvcc is present, the
# CUDA tests), runs the test suite, then builds the PyTorch extension and runs its pytest
# suite (cmake/test_python.cmake: it makes a Python environment in build/python-venv when no
# python3 imports torch), and prints a summary of both:   cmake -P cmake/test.cmake
# -DMPE_SKIP_PYTHON=ON leaves the PyTorch part out (the summary says so).
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/junit_counts.cmake")
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
# -DMPE_EXAMPLE_OPT_FLAGS=... does the same for the examples (CI: -O1).
if(NOT DEFINED MPE_EXAMPLE_OPT_FLAGS)
  set(MPE_EXAMPLE_OPT_FLAGS "")
endif()
string(REPLACE ";" "\\;" example_opt "${MPE_EXAMPLE_OPT_FLAGS}")
mpe_configure(-DMPE_BUILD_TESTS=ON -DMPE_BUILD_BENCHMARKS=ON -DMPE_ENABLE_CUDA=ON -DMPE_CUDA_FULL_MATRIX=OFF
              "-DMPE_BENCH_OPT_FLAGS=${bench_opt}" "-DMPE_EXAMPLE_OPT_FLAGS=${example_opt}")
mpe_jobs(jobs)
execute_process(COMMAND ${CMAKE_COMMAND} --build "${MPE_BUILD_DIR}" -j ${jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: build failed")
endif()
# Passive OpenMP waiting: CTest runs several multi-threaded tests at once on few cores.
set(ctest_junit "${MPE_BUILD_DIR}/ctest-junit.xml")
file(REMOVE "${ctest_junit}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env OMP_WAIT_POLICY=passive ${CMAKE_CTEST_COMMAND} --test-dir "${MPE_BUILD_DIR}"
                        --output-on-failure -j ${jobs} --output-junit "${ctest_junit}"
                RESULT_VARIABLE rc)
mpe_junit_counts("${ctest_junit}" ctest_counts)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: tests failed (CTest: ${ctest_counts})")
endif()
# The PyTorch extension's tests (cmake/test_python.cmake); -DMPE_SKIP_PYTHON=ON skips them
# (CI runs them separately once its environment is ready).
if(MPE_SKIP_PYTHON)
  set(MPE_PYTHON_SKIPPED "-DMPE_SKIP_PYTHON=ON")
else()
  # The extension's test build at -O1 unless MPE_TORCH_OPT says otherwise: the same bits in
  # about half the compile time (benchmarks build it at -O3, python/README.md).
  if("$ENV{MPE_TORCH_OPT}" STREQUAL "")
    set(ENV{MPE_TORCH_OPT} "-O1")
  endif()
  include("${CMAKE_CURRENT_LIST_DIR}/test_python.cmake")
endif()
set(cuda_note "")
if(NOT ctest_counts MATCHES " 0 skipped")
  set(cuda_note " (CTest lists the skipped ones above; the CUDA tests skip without a GPU)")
endif()
message(STATUS "mpe: summary")
message(STATUS "  C++ (CTest):        ${ctest_counts}${cuda_note}")
if(MPE_PYTHON_SKIPPED)
  message(STATUS "  Python (pytest):    NOT RUN")
  message(WARNING "mpe: the PyTorch extension's tests did not run: ${MPE_PYTHON_SKIPPED}")
else()
  message(STATUS "  Python (pytest):    ${MPE_PYTEST_COUNTS}")
endif()
