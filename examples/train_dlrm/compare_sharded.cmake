# Runs train_dlrm once in one process and once under mpirun -np NP with --shard SHARD on
# the same small synthetic job, and compares the test log loss from the --json outputs:
# identical for table, row and column (SGD; one index per bag).
# cmake -DEXE=... -DMPIEXEC=... -DFLAGS="..." -DSHARD=table -DNP=2 -DOUT=dir
#       [-DSTORAGE=fp32 -DCACHE_KIND=lru -DROUNDING=stochastic] [-DFORMAT=libfm -DDATA=file]
#       -P compare_sharded.cmake
# STORAGE, CACHE_KIND and ROUNDING default to an FP32 store with a 5 % LRU cache; with CACHE_KIND=none
# a quantized store with stochastic rounding must match too (one rounding stream per row,
# keyed by its table and row, whoever holds it).
if(NOT DEFINED STORAGE)
  set(STORAGE fp32)
endif()
if(NOT DEFINED CACHE_KIND)
  set(CACHE_KIND lru)
endif()
if(NOT DEFINED ROUNDING)
  set(ROUNDING stochastic)
endif()
set(args --scale 0.0005 --train-samples 4000 --test-samples 2000 --dim 8 --storage ${STORAGE} --cache ${CACHE_KIND}
         --cache-fraction 0.05 --rounding ${ROUNDING} --quiet)
if(DEFINED FORMAT)  # a file instead: -DFORMAT=libfm -DDATA=path (its last quarter the test set)
  set(args --format ${FORMAT} --data ${DATA} --test-fraction 0.25 --epochs 2 --dim 8 --storage ${STORAGE}
           --cache ${CACHE_KIND} --cache-fraction 0.05 --rounding ${ROUNDING} --quiet)
endif()
file(MAKE_DIRECTORY "${OUT}")
separate_arguments(flags UNIX_COMMAND "${FLAGS}")
execute_process(COMMAND ${EXE} ${args} --json ${OUT}/one.json RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "single-process run failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env OMP_NUM_THREADS=1 ${MPIEXEC} -np ${NP} ${flags} ${EXE} ${args}
                        --shard ${SHARD} --json ${OUT}/sharded.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "mpirun -np ${NP} --shard ${SHARD} failed (${rc})")
endif()
file(READ ${OUT}/one.json a)
file(READ ${OUT}/sharded.json b)
string(JSON la GET "${a}" 0 logloss)
string(JSON lb GET "${b}" 0 logloss)
message("log loss (${STORAGE}, cache ${CACHE_KIND}, ${ROUNDING} rounding): one process ${la}, ${NP} ranks --shard ${SHARD} ${lb}")
# Every shard kind must match exactly here: SGD, and Criteo bags hold one index per table,
# so a row-wise bag never spans ranks (its partial sums are exact; see README).
if(NOT la STREQUAL lb)
  message(FATAL_ERROR "${SHARD}-wise log loss ${lb} is not identical to ${la}")
endif()
