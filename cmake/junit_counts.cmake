# SPDX-License-Identifier: Apache-2.0
# mpe_junit_counts(<file> <out>): "<p> passed, <s> skipped, <f> failed" from the first
# <testsuite> of a JUnit XML file (CTest's --output-junit, pytest's --junitxml), or
# "no result file" when it is missing.
function(mpe_junit_counts file out)
  if(NOT EXISTS "${file}")
    set(${out} "no result file (${file})" PARENT_SCOPE)
    return()
  endif()
  file(READ "${file}" xml LIMIT 4096)
  string(REGEX MATCH "<testsuite[ \t\r\n][^>]*>" suite "${xml}")
  foreach(k tests failures errors skipped disabled)
    set(${k} 0)
    if(suite MATCHES "[ \t\r\n]${k}=\"([0-9]+)\"")
      set(${k} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  math(EXPR failed "${failures} + ${errors}")
  math(EXPR skipped "${skipped} + ${disabled}")
  math(EXPR passed "${tests} - ${failed} - ${skipped}")
  set(${out} "${passed} passed, ${skipped} skipped, ${failed} failed" PARENT_SCOPE)
endfunction()
