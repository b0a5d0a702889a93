// Sharded runs (--shard table|row|column|auto under mpirun -np N): the 26 tables live in
// one mpe::sharded::ShardedEmbedding over MPI_COMM_WORLD. Every rank reads the same global
// batch, passes its contiguous slice of samples (data-parallel input) to the sharded
// embedding, and all-gathers the pooled vectors; the small dense model is replicated: every
// rank runs it on the whole batch with the same bits, so the only parallel part is the
// embedding (the part that outgrows a machine). Built only when MPI is found; instantiated
// in sharded.cpp (FP32, FP16 stores) and sharded_quantized.cpp (INT8, INT4), two
// translation units that compile side by side.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <mpe/sharded/mpi_comm.hpp>
#include <mpe/sharded/sharded_embedding.hpp>

#include "trainer.hpp"

namespace dlrm::sharded_run {

// The Emb interface train_and_eval uses, on a ShardedEmbedding: global batches in,
// global outputs out (each rank computes its slice, then all-gather).
template <class Sh>
class ShardedAdapter {
 public:
  ShardedAdapter(Sh& sh, mpe::sharded::MpiComm& comm) : sh_(&sh), comm_(&comm) {}

  void forward(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<float> out,
               mpe::Pooling pooling, std::span<const float> weights = {}) {
    slice(idx, off, weights);
    local_out_.resize(static_cast<std::size_t>(hi_ - lo_) * TD());
    sh_->forward(lidx_, loff_, local_out_, pooling, lw_);
    gather(out);
  }
  void forward_inference(std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                         std::span<float> out, mpe::Pooling pooling,
                         std::span<const float> weights = {}) const {
    auto* self = const_cast<ShardedAdapter*>(this);
    self->slice(idx, off, weights);
    self->local_out_.resize(static_cast<std::size_t>(hi_ - lo_) * TD());
    sh_->forward_inference(lidx_, loff_, self->local_out_, pooling, lw_);
    self->gather(out);
  }
  template <class Opt>
  void backward(std::span<const float> grad, const Opt& opt) {
    sh_->backward(
        grad.subspan(static_cast<std::size_t>(lo_) * TD(), static_cast<std::size_t>(hi_ - lo_) * TD()), opt);
  }
  void reset_stats() { sh_->reset_stats(); }
  mpe::CacheStats stats() const { return sh_->stats_reduced(); }
  mpe::MemoryFootprint memory() const {
    const auto per = sh_->memory_per_rank();
    mpe::MemoryFootprint m;
    for (const auto& x : per) m += x;
    return m;
  }

 private:
  std::size_t TD() const {
    return static_cast<std::size_t>(sh_->num_tables()) * static_cast<std::size_t>(sh_->dim());
  }
  // Samples [lo, hi) of the global batch: the contiguous block of this rank (and their
  // per-sample weights, when given).
  void slice(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<const float> w) {
    const std::int64_t T = sh_->num_tables(), B = static_cast<std::int64_t>(off.size() - 1) / T;
    const int N = comm_->size(), r = comm_->rank();
    B_ = B;
    lo_ = B * r / N;
    hi_ = B * (r + 1) / N;
    lidx_.clear();
    lw_.clear();
    loff_.assign(1, 0);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t b = lo_; b < hi_; ++b) {
        const auto j = static_cast<std::size_t>(t * B + b);
        lidx_.insert(lidx_.end(), idx.begin() + off[j], idx.begin() + off[j + 1]);
        if (!w.empty()) lw_.insert(lw_.end(), w.begin() + off[j], w.begin() + off[j + 1]);
        loff_.push_back(static_cast<std::int64_t>(lidx_.size()));
      }
  }
  // All-gather of the ranks' (B_r, T*D) slices into (B, T*D), in rank order.
  void gather(std::span<float> out) {
    const int N = comm_->size();
    std::vector<std::int64_t> sc(static_cast<std::size_t>(N), static_cast<std::int64_t>(local_out_.size())),
        rc;
    std::vector<float> send;
    for (int r = 0; r < N; ++r) send.insert(send.end(), local_out_.begin(), local_out_.end());
    for (int r = 0; r < N; ++r)
      rc.push_back(
          static_cast<std::int64_t>((B_ * (r + 1) / N - B_ * r / N) * static_cast<std::int64_t>(TD())));
    comm_->alltoallv(std::span<const float>(send), std::span<const std::int64_t>(sc), out,
                     std::span<const std::int64_t>(rc));
  }

  Sh* sh_;
  mpe::sharded::MpiComm* comm_;
  std::int64_t B_ = 0, lo_ = 0, hi_ = 0;
  std::vector<std::int64_t> lidx_, loff_;
  std::vector<float> lw_;
  std::vector<float> local_out_;
};

inline std::string bytes_mib(std::size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

template <class Storage, class Rounding>
RunResult run_sharded_inst(const RunSpec& spec, const DataSetup& data) {
  using Sh = mpe::sharded::ShardedEmbedding<Storage, mpe::Lru<32>, Rounding, mpe::sharded::MpiComm>;
  mpe::sharded::MpiComm comm(MPI_COMM_WORLD);
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = data.table_rows;
  cfg.dim = spec.dim;
  const std::int64_t cache_rows = cache_rows_of(spec, data, 32);  // Lru<32>
  cfg.cache_rows = cache_rows;
  cfg.seed = embedding_seed(spec);
  cfg.max_range_growth = range_growth_of<Storage>(spec);
  const int N = comm.size();
  // --shard and --comm-precision are checked by CLI11 (IsMember); the helpers throw too.
  const mpe::sharded::ShardingPlan plan = mpe::sharded::plan_by_name(spec.shard, cfg.table_rows, cfg.dim, N);
  mpe::sharded::ShardOptions opts;
  opts.precision = mpe::sharded::comm_precision_from_string(spec.comm_precision);
  Sh sh(cfg, plan, comm, opts);
  if (comm.rank() == 0 && spec.progress)
    std::fprintf(stderr, "sharding plan (%s, %d ranks):\n%s", spec.shard.c_str(), N,
                 plan.to_string().c_str());
  sh.init_uniform(-spec.emb_init, spec.emb_init);
  ShardedAdapter<Sh> emb(sh, comm);
  RunSpec s = spec;
  if (comm.rank() != 0) s.progress = false;  // one rank prints progress
  RunResult r = train_and_eval(s, data, &emb, cache_rows);
  const auto per = sh.memory_per_rank();
  std::vector<std::uint64_t> bytes{sh.comm_stats().index_bytes, sh.comm_stats().vector_bytes,
                                   sh.comm_stats().calls};
  comm.allreduce_sum(std::span<std::uint64_t>(bytes));
  if (comm.rank() == 0) {
    for (std::size_t k = 0; k < per.size(); ++k)
      std::fprintf(stderr, "memory rank %zu: store %s, cache %s, optimizer %s, metadata %s (embedding %s)\n",
                   k, bytes_mib(per[k].store_bytes).c_str(), bytes_mib(per[k].cache_bytes).c_str(),
                   bytes_mib(per[k].optimizer_bytes).c_str(), bytes_mib(per[k].metadata_bytes).c_str(),
                   bytes_mib(per[k].embedding_bytes()).c_str());
    const double steps = static_cast<double>(std::max<std::uint64_t>(sh.step(), 1));
    std::fprintf(stderr,
                 "all-to-all bytes per training step (all ranks, self excluded, incl. evaluation): %.0f "
                 "indices + %.0f vectors\n",
                 static_cast<double>(bytes[0]) / steps, static_cast<double>(bytes[1]) / steps);
  }
  return r;
}

template <class Storage>
RunResult run_sharded_store(const RunSpec& spec, const DataSetup& data) {
  // The config passed sharded_unsupported (run_sharded): the cache is LRU or none.
  if (spec.rounding == "stochastic") return run_sharded_inst<Storage, mpe::StochasticRounding>(spec, data);
  return run_sharded_inst<Storage, mpe::NearestRounding>(spec, data);
}

// INT8 and INT4 stores (sharded_quantized.cpp).
RunResult run_quantized(const RunSpec& spec, const DataSetup& data);

}  // namespace dlrm::sharded_run
