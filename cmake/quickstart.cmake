# SPDX-License-Identifier: Apache-2.0
# Builds and runs the main job, the DLRM trainer, on its embedded synthetic Criteo-shaped
# data:   cmake -P cmake/quickstart.cmake
# Pass trainer options with -DARGS="...", e.g. cmake -DARGS="--sweep paper" -P cmake/quickstart.cmake
include("${CMAKE_CURRENT_LIST_DIR}/common.cmake")
# Only what the main job needs: no tests, benchmarks or CUDA targets are configured (a later
# cmake/test.cmake configures them again in the same build tree).
set(MPE_DEBIAN_PACKAGES ${MPE_MAIN_PACKAGES})
mpe_configure(-DMPE_BUILD_TESTS=OFF -DMPE_BUILD_BENCHMARKS=OFF -DMPE_ENABLE_CUDA=OFF)
mpe_jobs(jobs)
execute_process(COMMAND ${CMAKE_COMMAND} --build "${MPE_BUILD_DIR}" --target train_dlrm -j ${jobs} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: building train_dlrm failed")
endif()
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND "${MPE_BUILD_DIR}/examples/train_dlrm/train_dlrm" ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpe: train_dlrm exited with ${rc}")
endif()
