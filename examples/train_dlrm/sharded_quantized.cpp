// Sharded runs over MPI with INT8 and INT4 stores (sharded_run.hpp; a translation unit of
// its own so it compiles beside sharded.cpp).
#include "sharded_run.hpp"

namespace dlrm::sharded_run {

RunResult run_quantized(const RunSpec& spec, const DataSetup& data) {
  if (spec.storage == "int8") return run_sharded_store<mpe::Int8Rowwise>(spec, data);
  return run_sharded_store<mpe::Int4Rowwise>(spec, data);
}

}  // namespace dlrm::sharded_run
