// What one training run is asked to do and what it reports. No library
// include here: main.cpp only sees these types and the per-storage entry
// points, each compiled in its own configs_*.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data.hpp"

namespace dlrm {

struct RunSpec {
  std::string label;                    // e.g. "int8+lru5%/sr"
  std::string storage = "int8";         // fp32 | fp16 | int8 | fp8 | int4 | int2 | dense (no embeddings)
  std::string cache = "lru";            // lru | lfu | direct | none
  double cache_fraction = 0.05;         // of all rows of all tables
  std::string rounding = "stochastic";  // stochastic | nearest
  int dim = 16;
  int base_dim = 0;    // the run's --dim when this config overrides it ("@d<D>"), else 0
  int large_dim = 0;   // "@md<d>": tables holding >= 1 % of all rows train at this D, zero-padded
                       // to dim in the model (mixed dimensions); 0: every table at dim
  int large_hash = 0;  // "@h<k>": ids of those large tables hashed (id mod ceil(rows/k)) into
                       // k times fewer rows (the hashing trick); 0: no hashing
  int large_tier = 0;  // "@t<p>": with @h<k>, those tables' ids go through mpe::TieredRows:
                       // p % of a table's ids may hold rows of their own (hot ids), the
                       // others share the ceil(rows/k) hashed rows; 0: plain hashing
  std::uint64_t seed = 1;
  int epochs = 1;
  int batch_size = 256;
  float lr = 0.3f;  // tuned on the synthetic default (0.1/0.3/1.0 tried)
  float emb_lr = 0.3f;
  float emb_init = 0.05f;     // embeddings ~ U(-emb_init, emb_init)
  float range_growth = 0.0f;  // --range-growth: EmbeddingConfig::max_range_growth of the int8, int4
                              // and int2 stores (0: off; the other stores ignore it)
  std::vector<int> bottom_hidden{64};
  std::vector<int> top_hidden{64};
  int eval_batch = 4096;
  bool progress = true;
  std::string shard = "none";            // none | table | row | column | auto (under mpirun)
  std::string comm_precision = "fp32";   // sharded: pooled vectors/gradients on the wire (fp32 | fp16 | bf16)
  std::string optimizer = "sgd";         // embeddings: sgd | adagrad | rowwise_adagrad | adam
  std::string state_precision = "fp32";  // embedding optimizer state: fp32 | bf16 | fp16
  std::string loss_trace;                // --loss-trace: per-batch CSV of the training loss (empty: none)
  bool stop_on_divergence = true;        // DivergenceMonitor: throw Diverged when the loss returns to the
                                         // label-mean baseline (--on-divergence ignore: false)
};

struct RunResult {
  RunSpec spec;
  std::int64_t total_rows = 0, cache_rows = 0;
  std::size_t memory_bytes =
      0;  // store + cache + metadata + optimizer state (every byte the tables train in)
  std::size_t store_bytes = 0, cache_bytes = 0, metadata_bytes = 0, optimizer_bytes = 0;
  double fp32_bytes = 0;  // an FP32 store of the same tables at this D, plus FP32 optimizer state
  double reduction = 0;   // fp32_bytes / memory_bytes (0 for dense-only); main.cpp replaces it by the
                          // FP32 config's memory_bytes / memory_bytes when the FP32 config ran
  double hit_rate = 0;    // hits / (hits + misses) over training (NaN without cache)
  std::uint64_t hits = 0, misses = 0, evictions = 0, writebacks = 0, saturated_rows = 0;
  double logloss = 0, auc = 0, accuracy = 0;
  double bayes_logloss = -1;  // synthetic only: log loss of the true p on the same test set
  double train_loss = 0;      // mean training loss of the last epoch
  double train_seconds = 0, eval_seconds = 0;
  std::string diverged;  // --on-divergence backoff: the divergences before the rate that trained
  std::uint64_t train_samples = 0, test_samples = 0;
};

struct DataSetup {
  std::string description;
  std::vector<std::int64_t> table_rows;
  int num_dense = kNumDense;  // dense features a sample (0 for the libsvm, libfm and avazu formats)
  std::function<std::unique_ptr<BatchSource>()> make_train, make_test;
  std::uint64_t train_size = 0, test_size = 0;
  double label_mean_logloss = -1;  // file input: the test log loss of predicting the training positive rate
};

// One per storage format (configs_<storage>.cpp); each dispatches on cache
// policy and rounding to a compile-time CachedEmbedding instantiation.
RunResult run_fp32(const RunSpec&, const DataSetup&);
RunResult run_fp16(const RunSpec&, const DataSetup&);
RunResult run_int8(const RunSpec&, const DataSetup&);
RunResult run_fp8(const RunSpec&, const DataSetup&);
RunResult run_int4(const RunSpec&, const DataSetup&);
RunResult run_int2(const RunSpec&, const DataSetup&);
RunResult run_dense_only(const RunSpec&, const DataSetup&);

// Sharded runs over MPI (sharded.cpp; built when MPI is found, else stubs in main.cpp).
RunResult run_sharded(const RunSpec&, const DataSetup&);
// Why a config cannot run sharded (main.cpp; empty when it can): sharded runs build an
// fp32, fp16, int8 or int4 store with an LRU cache or none (dense-only needs no tables).
std::string sharded_unsupported(const RunSpec&);
bool dist_available();
void dist_init(int* argc, char*** argv);
void dist_finalize();
int dist_rank();

}  // namespace dlrm
