# Compiles tests/no_fma/kernels.cpp (the AVX-512 pooling kernel, every format, and the host's
# AVX-512 and AVX2 row stores), and tests/no_fma/embedding.cpp (two whole CachedEmbedding
# instantiations, with -fopenmp), with each compiler given in COMPILERS (separated by |) at
# -O3 -ffp-contract=fast and fails if an object holds an FMA instruction (vfmadd / vfmsub /
# vfnmadd / vfnmsub): with AVX-512 enabled both GCC and Clang may fuse a multiply and an add
# unless the kernel prevents it, and a fused product would change the bits the numerics
# contract fixes (docs/numerics.md).
# Inputs: -DSOURCE_DIR=<repo> -DWORK_DIR=<dir> -DCOMPILERS=<c1|c2> -DOBJDUMP=<objdump>
file(MAKE_DIRECTORY ${WORK_DIR})
string(REPLACE "|" ";" COMPILERS "${COMPILERS}")

# Compiles tests/no_fma/<name>.cpp with `cxx` (extra flags after the name), fails on an FMA
# instruction in the object, and sets <name>_asm in the caller to its disassembly.
function(mpe_check_no_fma cxx name)
  get_filename_component(tag ${cxx} NAME)
  set(obj ${WORK_DIR}/${name}_${tag}.o)
  execute_process(COMMAND ${cxx} -std=gnu++20 -O3 -ffp-contract=fast ${ARGN} -I${SOURCE_DIR}/include -c
                          ${SOURCE_DIR}/tests/no_fma/${name}.cpp -o ${obj}
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${cxx} failed to compile tests/no_fma/${name}.cpp:\n${err}")
  endif()
  execute_process(COMMAND ${OBJDUMP} -d ${obj} OUTPUT_VARIABLE asm RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${OBJDUMP} -d ${obj} failed")
  endif()
  string(REGEX MATCHALL "vfn?m(add|sub)[0-9a-z]*" fmas "${asm}")
  list(LENGTH fmas n)
  if(n GREATER 0)
    message(FATAL_ERROR "${cxx}: ${n} FMA instructions in tests/no_fma/${name}.cpp's object under -ffp-contract=fast")
  endif()
  set(${name}_asm "${asm}" PARENT_SCOPE)
endfunction()

set(checked 0)
foreach(cxx IN LISTS COMPILERS)
  if(NOT cxx)
    continue()
  endif()
  mpe_check_no_fma(${cxx} kernels)
  string(REGEX MATCHALL "vmulps[^\n]*zmm" muls "${kernels_asm}")
  list(LENGTH muls nmul)
  if(nmul EQUAL 0)  # the kernel was compiled out: nothing was checked
    message(FATAL_ERROR "${cxx}: no 512-bit multiply in the object (MPE_HOST_AVX512 = 0?)")
  endif()
  message(STATUS "${cxx}: no FMA, ${nmul} 512-bit multiplies")
  # The whole class, with OpenMP as a trainer builds it.
  mpe_check_no_fma(${cxx} embedding -fopenmp)
  message(STATUS "${cxx}: CachedEmbedding compiles, no FMA")
  math(EXPR checked "${checked} + 1")
endforeach()
if(checked EQUAL 0)
  message(FATAL_ERROR "no compiler to check")
endif()
