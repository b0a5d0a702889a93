// Fp16 store: its 6 instantiations (3 cache policies x 2 roundings).
#include "trainer.hpp"

namespace dlrm {

RunResult run_fp16(const RunSpec& spec, const DataSetup& data) { return run_storage<mpe::Fp16>(spec, data); }

}  // namespace dlrm
