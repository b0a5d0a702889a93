// Fp32 store: its 6 instantiations (3 cache policies x 2 roundings).
#include "trainer.hpp"

namespace dlrm {

RunResult run_fp32(const RunSpec& spec, const DataSetup& data) { return run_storage<mpe::Fp32>(spec, data); }

// Dense-only baseline: bottom MLP -> top MLP, no embeddings, no interaction pairs.
RunResult run_dense_only(const RunSpec& spec, const DataSetup& data) {
  return train_and_eval<NoEmbedding>(spec, data, nullptr, 0);
}

}  // namespace dlrm
