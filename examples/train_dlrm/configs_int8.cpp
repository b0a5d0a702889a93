// Int8Rowwise store: its instantiations (3 cache policies x 2 roundings, and the compact
// optimizer-state precisions with LRU).
#include "trainer.hpp"

namespace dlrm {

RunResult run_int8(const RunSpec& spec, const DataSetup& data) {
  return run_storage<mpe::Int8Rowwise>(spec, data);
}

}  // namespace dlrm
