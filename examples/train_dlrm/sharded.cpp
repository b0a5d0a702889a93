// Sharded runs over MPI: the dispatch, the FP32/FP16 instantiations and the MPI hooks
// (sharded_run.hpp explains the setup; INT8/INT4 in sharded_quantized.cpp).
#include "sharded_run.hpp"

namespace dlrm {

RunResult run_sharded(const RunSpec& spec, const DataSetup& data) {
  if (const std::string why = sharded_unsupported(spec); !why.empty()) throw std::invalid_argument(why);
  if (spec.storage == "fp32") return sharded_run::run_sharded_store<mpe::Fp32>(spec, data);
  if (spec.storage == "fp16") return sharded_run::run_sharded_store<mpe::Fp16>(spec, data);
  if (spec.storage == "int8" || spec.storage == "int4") return sharded_run::run_quantized(spec, data);
  throw std::logic_error("run_sharded: storage " + spec.storage + " passed sharded_unsupported");
}

bool dist_available() { return true; }
void dist_init(int* argc, char*** argv) { MPI_Init(argc, argv); }
void dist_finalize() { MPI_Finalize(); }
int dist_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace dlrm
