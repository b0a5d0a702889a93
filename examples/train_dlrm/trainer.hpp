// The training loop, generic over the embedding type, and the run-time ->
// compile-time dispatch on cache policy and rounding. Included by the
// configs_*.cpp files, so each storage format's instantiations compile in
// their own translation unit, and by sharded_run.hpp (MPI runs).
#pragma once

#include <unistd.h>

#include <Eigen/Core>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mpe/mpe.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "data.hpp"
#include "divergence.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "reshape.hpp"
#include "run.hpp"

namespace dlrm {

// Progress line on stderr: rows/s, ETA, running training loss. On a terminal
// it is rewritten in place every 0.25 s, otherwise a line every 10 s.
class Progress {
 public:
  Progress(std::string label, std::uint64_t total, bool enabled)
      : label_(std::move(label)),
        total_(total),
        enabled_(enabled),
        tty_(isatty(2) != 0),
        start_(Clock::now()),
        last_(start_) {}
  void update(std::uint64_t rows, double loss) {
    done_ += rows;
    loss_sum_ += loss * static_cast<double>(rows);
    loss_n_ += rows;
    if (!enabled_) return;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < (tty_ ? 0.25 : 10.0)) return;
    last_ = now;
    print(false);
  }
  void finish() {
    if (enabled_ && tty_) {
      print(true);
    }
  }
  double mean_loss_and_reset() {
    const double m = loss_n_ ? loss_sum_ / static_cast<double>(loss_n_) : 0.0;
    loss_sum_ = 0;
    loss_n_ = 0;
    return m;
  }

 private:
  using Clock = std::chrono::steady_clock;
  void print(bool final_line) {
    const double t = std::chrono::duration<double>(Clock::now() - start_).count();
    const double rate = t > 0 ? static_cast<double>(done_) / t : 0.0;
    const double eta = rate > 0 && total_ > done_ ? static_cast<double>(total_ - done_) / rate : 0.0;
    std::fprintf(stderr, "%s%-22s %10llu/%llu rows  %8.0f rows/s  ETA %5.0fs  loss %.4f%s", tty_ ? "\r" : "",
                 label_.c_str(), static_cast<unsigned long long>(done_),
                 static_cast<unsigned long long>(total_), rate, eta,
                 loss_n_ ? loss_sum_ / static_cast<double>(loss_n_) : 0.0, (tty_ && !final_line) ? "" : "\n");
    std::fflush(stderr);
  }
  std::string label_;
  std::uint64_t total_, done_ = 0;
  bool enabled_, tty_;
  Clock::time_point start_, last_;
  double loss_sum_ = 0;
  std::uint64_t loss_n_ = 0;
};

struct NoEmbedding {};

template <class Emb>
RunResult train_and_eval(const RunSpec& spec, const DataSetup& data, Emb* emb, std::int64_t cache_rows) {
  constexpr bool kHasEmb = !std::is_same_v<Emb, NoEmbedding>;
  using Clock = std::chrono::steady_clock;
  const int T = kHasEmb ? static_cast<int>(data.table_rows.size()) : 0;
  const int D = spec.dim;

  DlrmShape shape;
  shape.dense_in = data.num_dense;
  shape.dim = D;
  shape.tables = T;
  shape.bottom_hidden = spec.bottom_hidden;
  shape.top_hidden = spec.top_hidden;
  Dlrm model(shape, spec.seed);

  RunResult res;
  res.spec = spec;
  for (auto r : data.table_rows) res.total_rows += r;
  res.cache_rows = cache_rows;
  // FP32 weights and FP32 optimizer state of the same optimizer at this D.
  std::int64_t state_floats = 0;
  mpe::KnownOptimizers::visit(spec.optimizer,
                              [&]<class Opt>() { state_floats = mpe::OptimizerRule<Opt>::state_floats(D); });
  res.fp32_bytes = 4.0 * static_cast<double>(D + state_floats) * static_cast<double>(res.total_rows);

  Batch batch;
  std::vector<float> emb_out, emb_grad;
  MatT<float> dlogit;
  auto train = data.make_train();
  Progress prog(spec.label + " s" + std::to_string(spec.seed),
                static_cast<std::uint64_t>(spec.epochs) * train->size_hint(), spec.progress);
  if constexpr (kHasEmb) emb->reset_stats();
  const auto t0 = Clock::now();
  DivergenceMonitor monitor;   // checked before this batch's update is applied
  std::FILE* trace = nullptr;  // --loss-trace: one line per batch
  if (!spec.loss_trace.empty()) {
    trace = std::fopen(spec.loss_trace.c_str(), "a");
    if (!trace) throw std::runtime_error("cannot open --loss-trace '" + spec.loss_trace + "'");
    std::fseek(trace, 0, SEEK_END);
    if (std::ftell(trace) == 0)
      std::fprintf(trace, "config,seed,emb_lr,epoch,batch,size,positives,loss,logit_sd\n");
  }
  std::uint64_t batch_no = 0;
  for (int e = 0; e < spec.epochs; ++e) {
    if (e > 0) train->reset();
    prog.mean_loss_and_reset();
    while (train->next(batch, spec.batch_size)) {
      const int B = batch.size;
      const std::size_t n = static_cast<std::size_t>(B) * T * D;
      emb_out.resize(n);
      emb_grad.resize(n);
      if constexpr (kHasEmb)
        emb->forward(std::span<const std::int64_t>(batch.indices),
                     std::span<const std::int64_t>(batch.offsets), std::span<float>(emb_out),
                     mpe::Pooling::Sum, std::span<const float>(batch.weights));
      const MatT<float>& logit = model.forward(batch.dense, emb_out.data());
      const double loss = bce_with_logits<float>(logit, batch.labels.data(), dlogit);
      double logit_sd = 0;  // spread of this batch's logits (DivergenceMonitor: collapsed predictions)
      if (spec.stop_on_divergence || trace) {
        double s1 = 0, s2 = 0;
        for (int b = 0; b < B; ++b) s1 += logit(0, b);
        const double mean = s1 / B;
        for (int b = 0; b < B; ++b) s2 += (logit(0, b) - mean) * (logit(0, b) - mean);
        logit_sd = std::sqrt(s2 / B);
      }
      model.backward(dlogit, emb_grad.data());
      double positives = 0;
      for (int b = 0; b < B; ++b) positives += batch.labels[b];
      if (trace)
        std::fprintf(trace, "%s,%llu,%g,%d,%llu,%d,%g,%.6f,%.6f\n", spec.label.c_str(),
                     static_cast<unsigned long long>(spec.seed), spec.emb_lr, e,
                     static_cast<unsigned long long>(batch_no), B, positives, loss, logit_sd);
      ++batch_no;
      if (spec.stop_on_divergence) {
        const std::string why = monitor.add(loss, B, positives, logit_sd, [&]() -> std::uint64_t {
          if constexpr (kHasEmb)
            return emb->stats().saturated_rows;
          else
            return 0;
        });
        if (!why.empty())
          throw Diverged(spec.label + " (seed " + std::to_string(spec.seed) + ", embedding lr " +
                         fmt_g(spec.emb_lr) + ", dense lr " + fmt_g(spec.lr) + ") diverged: " + why);
      }
      if constexpr (kHasEmb) {
        const std::span<const float> g(emb_grad);
        if (spec.optimizer == "sgd")
          emb->backward(g, mpe::Sgd{spec.emb_lr});
        else if (spec.optimizer == "adagrad")
          emb->backward(g, mpe::Adagrad{spec.emb_lr});
        else if (spec.optimizer == "rowwise_adagrad")
          emb->backward(g, mpe::RowwiseAdagrad{spec.emb_lr});
        else if (spec.optimizer == "adam")
          emb->backward(g, mpe::Adam{spec.emb_lr});
        else
          throw std::invalid_argument("unknown optimizer '" + spec.optimizer + "'");
      }
      model.sgd(spec.lr);
      res.train_samples += static_cast<std::uint64_t>(B);
      prog.update(static_cast<std::uint64_t>(B), loss);
    }
    if (e + 1 == spec.epochs) res.train_loss = prog.mean_loss_and_reset();
  }
  if (trace) std::fclose(trace);
  prog.finish();
  res.train_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  if constexpr (kHasEmb) {
    const mpe::CacheStats st = emb->stats();
    res.hits = st.hits;
    res.misses = st.misses;
    res.evictions = st.evictions;
    res.writebacks = st.writebacks;
    res.saturated_rows = st.saturated_rows;
    res.hit_rate = cache_rows > 0 && st.hits + st.misses > 0
                       ? static_cast<double>(st.hits) / static_cast<double>(st.hits + st.misses)
                       : std::numeric_limits<double>::quiet_NaN();
    const mpe::MemoryFootprint m = emb->memory();
    res.store_bytes = m.store_bytes;
    res.cache_bytes = m.cache_bytes;
    res.metadata_bytes = m.metadata_bytes;
    res.optimizer_bytes = m.optimizer_bytes;
    res.memory_bytes = m.store_bytes + m.cache_bytes + m.metadata_bytes + m.optimizer_bytes;
    res.reduction = res.fp32_bytes / static_cast<double>(res.memory_bytes);
  } else {
    res.hit_rate = std::numeric_limits<double>::quiet_NaN();
  }

  // Evaluation: forward_inference only (const, changes nothing).
  const auto t1 = Clock::now();
  auto test = data.make_test();
  std::vector<float> p, y, pt;
  p.reserve(test->size_hint());
  y.reserve(test->size_hint());
  while (test->next(batch, spec.eval_batch)) {
    const int B = batch.size;
    emb_out.resize(static_cast<std::size_t>(B) * T * D);
    if constexpr (kHasEmb) {
      const Emb& cemb = *emb;
      cemb.forward_inference(std::span<const std::int64_t>(batch.indices),
                             std::span<const std::int64_t>(batch.offsets), std::span<float>(emb_out),
                             mpe::Pooling::Sum, std::span<const float>(batch.weights));
    }
    const MatT<float> logit = model.infer(batch.dense, emb_out.data());
    for (int b = 0; b < B; ++b) {
      p.push_back(static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logit(0, b))))));
      y.push_back(batch.labels[b]);
    }
    pt.insert(pt.end(), batch.p_true.begin(), batch.p_true.end());
  }
  res.eval_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  res.test_samples = p.size();
  res.logloss = log_loss(p, y);
  res.auc = roc_auc(p, y);
  res.accuracy = accuracy(p, y);
  if (!pt.empty() && pt.size() == y.size()) res.bayes_logloss = log_loss(pt, y);
  return res;
}

// The stochastic-rounding seed of a run's embedding tables (every path: uniform, reshaped,
// sharded), derived from the model seed.
inline std::uint64_t embedding_seed(const RunSpec& spec) { return hash_combine(spec.seed, 0xe3b); }

// Cache rows of a run over every table: --cache-fraction of all rows (0 with --cache none
// or a zero fraction), at least `ways` (the library rejects 0 < cache_rows < Ways).
inline std::int64_t cache_rows_of(const RunSpec& spec, const DataSetup& data, std::int64_t ways) {
  if (spec.cache == "none" || spec.cache_fraction <= 0) return 0;
  std::int64_t total = 0;
  for (auto r : data.table_rows) total += r;
  return std::max<std::int64_t>(std::llround(spec.cache_fraction * static_cast<double>(total)), ways);
}

// The run's --range-growth for a store with an affine per-row grid (INT8, INT4, INT2: what
// EmbeddingConfig::max_range_growth accepts, by the library's own trait), else 0.
template <class Storage>
float range_growth_of(const RunSpec& spec) {
  return mpe::detail::RowGrid<Storage>::affine ? spec.range_growth : 0.0f;
}

// "@md<d>" / "@h<k>" runs: tables holding at least 1 % of all rows at D = spec.large_dim
// and, with k > 0, hashed into ceil(rows / k) rows; the others as the uniform run.
template <class Storage, class Cache, class Rounding, class Precision>
RunResult run_reshaped(const RunSpec& spec, const DataSetup& data) {
  std::int64_t total = 0;
  for (auto r : data.table_rows) total += r;
  mpe::MixedDimConfig cfg;
  std::vector<std::int64_t> hashed;
  std::vector<std::optional<mpe::TieredRowsConfig>> tiers;
  for (auto r : data.table_rows) {
    const bool large = 100 * r >= total;
    const std::int64_t R = large && spec.large_hash > 0 ? (r + spec.large_hash - 1) / spec.large_hash : 0;
    hashed.push_back(R);
    std::int64_t rows = R > 0 ? R : r;
    if (R > 0 && spec.large_tier > 0) {
      // "@t<p>": p % of the table's ids (rounded up) in private rows before the R shared ones.
      mpe::TieredRowsConfig tc;
      tc.ids = r;
      tc.private_rows = (r * spec.large_tier + 99) / 100;
      tc.shared_rows = R;
      tc.seed = hash_combine(embedding_seed(spec), tiers.size());
      rows = tc.private_rows + tc.shared_rows;
      tiers.emplace_back(tc);
    } else {
      tiers.emplace_back();
    }
    cfg.tables.push_back({rows, large ? static_cast<std::int32_t>(spec.large_dim) : spec.dim});
  }
  cfg.cache_fraction = spec.cache != "none" ? spec.cache_fraction : 0.0;
  cfg.seed = embedding_seed(spec);
  cfg.max_range_growth = range_growth_of<Storage>(spec);
  mpe::MixedDimEmbedding<Storage, Cache, Rounding, Precision> md(cfg);
  {
    // The start of the uniform run of the same seed, so the comparison with it stays
    // paired: row r < R_t of table t starts as that run's row r, truncated to D_t. (An FP32
    // table of every row at D, initialized as run_instantiation does, read one table at a
    // time.)
    mpe::EmbeddingConfig full;
    full.table_rows = data.table_rows;
    full.dim = spec.dim;
    full.seed = cfg.seed;
    mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<32>, mpe::NearestRounding> ref(full);
    ref.init_uniform(-spec.emb_init, spec.emb_init);
    std::int64_t first = 0;
    std::vector<float> rows, cut;
    for (std::size_t t = 0; t < data.table_rows.size(); ++t) {
      const auto ti = static_cast<std::int64_t>(t);
      const std::int64_t n = cfg.tables[t].rows, d = md.dim(ti);
      rows.resize(static_cast<std::size_t>(n * spec.dim));
      ref.get_weights(std::span<float>(rows), first);
      cut.resize(static_cast<std::size_t>(n * d));
      for (std::int64_t r = 0; r < n; ++r) std::copy_n(rows.data() + r * spec.dim, d, cut.data() + r * d);
      md.set_weights(ti, std::span<const float>(cut));
      first += data.table_rows[t];
    }
  }
  std::int64_t cache_rows = 0;
  for (std::size_t g = 0; g < md.num_groups(); ++g) cache_rows += md.group(g).config().cache_rows;
  ReshapedTables<decltype(md)> emb(md, spec.dim, std::move(hashed), tiers);
  return train_and_eval(spec, data, &emb, cache_rows);
}

template <class Storage, class Cache, class Rounding, class Precision = mpe::StateFp32>
RunResult run_instantiation(const RunSpec& spec, const DataSetup& data, std::int64_t ways) {
  if (spec.large_dim > 0) {
    // Reshaped tables (@md / @h): with stochastic rounding and FP32 optimizer state only, to
    // keep the example's instantiations (and its build time) small.
    if constexpr (std::is_same_v<Rounding, mpe::StochasticRounding> &&
                  std::is_same_v<Precision, mpe::StateFp32>)
      return run_reshaped<Storage, Cache, Rounding, Precision>(spec, data);
    throw std::invalid_argument(
        "@md<d> / @h<k> are built with --rounding stochastic and --state-precision fp32 only");
  }
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = data.table_rows;
  cfg.dim = spec.dim;
  const std::int64_t cache_rows = cache_rows_of(spec, data, ways);
  cfg.cache_rows = cache_rows;
  cfg.seed = embedding_seed(spec);
  cfg.max_range_growth = range_growth_of<Storage>(spec);
  mpe::CachedEmbedding<Storage, Cache, Rounding, mpe::HostBackend, Precision> emb(cfg);
  emb.init_uniform(-spec.emb_init, spec.emb_init);
  return train_and_eval(spec, data, &emb, cache_rows);
}

template <class Storage, class Rounding>
RunResult run_cache(const RunSpec& spec, const DataSetup& data) {
  // Compact optimizer state: with the LRU cache (or none) only, to keep the example's
  // instantiations (and its build time) small.
  if (spec.state_precision != "fp32") {
    if (spec.cache != "lru" && spec.cache != "none")
      throw std::invalid_argument("--state-precision " + spec.state_precision +
                                  " is built with --cache lru or none only");
    if (spec.state_precision == "bf16")
      return run_instantiation<Storage, mpe::Lru<32>, Rounding, mpe::StateBf16>(spec, data, 32);
    if (spec.state_precision == "fp16")
      return run_instantiation<Storage, mpe::Lru<32>, Rounding, mpe::StateFp16>(spec, data, 32);
    throw std::invalid_argument("unknown state precision '" + spec.state_precision + "'");
  }
  if (spec.cache == "lru" || spec.cache == "none")
    return run_instantiation<Storage, mpe::Lru<32>, Rounding>(spec, data, 32);
  if (spec.cache == "lfu") return run_instantiation<Storage, mpe::Lfu<32>, Rounding>(spec, data, 32);
  if (spec.cache == "direct") return run_instantiation<Storage, mpe::DirectMapped, Rounding>(spec, data, 1);
  if (spec.cache == "stlru") {
    // Second-touch LRU: with stochastic rounding only (the example's build time).
    if constexpr (std::is_same_v<Rounding, mpe::StochasticRounding>)
      return run_instantiation<Storage, mpe::SecondTouchLru<32>, Rounding>(spec, data, 32);
    throw std::invalid_argument("--cache stlru is built with --rounding stochastic only");
  }
  throw std::invalid_argument("unknown cache policy '" + spec.cache + "'");
}

template <class Storage>
RunResult run_storage(const RunSpec& spec, const DataSetup& data) {
  if (spec.rounding == "stochastic") return run_cache<Storage, mpe::StochasticRounding>(spec, data);
  if (spec.rounding == "nearest") return run_cache<Storage, mpe::NearestRounding>(spec, data);
  throw std::invalid_argument("unknown rounding '" + spec.rounding + "'");
}

}  // namespace dlrm
