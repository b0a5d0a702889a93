// Int4Rowwise store: its 6 instantiations (3 cache policies x 2 roundings).
#include "trainer.hpp"

namespace dlrm {

RunResult run_int4(const RunSpec& spec, const DataSetup& data) {
  return run_storage<mpe::Int4Rowwise>(spec, data);
}

}  // namespace dlrm
