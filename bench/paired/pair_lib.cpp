// SPDX-License-Identifier: Apache-2.0
// Paired before/after driver, library half: compiled once per mpe header tree (hidden
// visibility, so two builds coexist in one process) and loaded by pair_main.cpp. Each
// object is a CachedEmbedding on HostBackend{1} (StochasticRounding, D = 64, seed 1,
// init_uniform(-0.05, 0.05)); run() is forward (+ backward with SGD 0.01 when training).
// See run.sh.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mpe/mpe.hpp"
namespace {
struct Batch {
  std::vector<std::int64_t> idx, off;
};
struct Obj {
  virtual ~Obj() = default;
  virtual void run(const Batch& b) = 0;
  virtual void stats(double* s) = 0;
};
template <class S, class Policy>
struct Emb : Obj {
  std::unique_ptr<mpe::CachedEmbedding<S, Policy, mpe::StochasticRounding, mpe::HostBackend>> e;
  std::vector<float> out, grad;
  bool train;
  Emb(const std::vector<std::int64_t>& rows, double frac, bool tr, std::int64_t B) : train(tr) {
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = rows;
    cfg.dim = 64;
    cfg.seed = 1;
    std::int64_t total = 0;
    for (auto r : rows) total += r;
    cfg.cache_rows = static_cast<std::int64_t>(frac * static_cast<double>(total));
    mpe::HostBackend be;
    be.num_threads = 1;
    // PAIR_4K=1 (not empty, not 0): 4 KiB pages, as fbgemm_side_by_side keeps its tables.
    const char* small_pages = std::getenv("PAIR_4K");
    be.huge_pages = small_pages == nullptr || *small_pages == '\0' || std::string(small_pages) == "0";
    e = std::make_unique<mpe::CachedEmbedding<S, Policy, mpe::StochasticRounding, mpe::HostBackend>>(cfg, be);
    e->init_uniform(-0.05f, 0.05f);
    out.resize(static_cast<std::size_t>(B) * rows.size() * 64);
    grad.resize(out.size());
    std::mt19937 g(0);
    std::normal_distribution<float> nd(0, 1e-3f);
    for (auto& x : grad) x = nd(g);
  }
  void run(const Batch& b) override {
    e->forward(b.idx, b.off, out);
    if (train) e->backward(grad, mpe::Sgd{0.01f});
  }
  void stats(double* s) override {
    auto st = e->stats();
    s[0] = st.unique_rows;
    s[1] = st.hits;
    s[2] = st.misses;
    s[3] = st.writebacks;
  }
};
}  // namespace
extern "C" __attribute__((visibility("default"))) void* pair_make(int kind, const std::int64_t* rows, int T,
                                                                  double frac, int train, std::int64_t B) {
  std::vector<std::int64_t> r(rows, rows + T);
  Obj* o = nullptr;
  if (kind == 0) o = new Emb<mpe::Fp32, mpe::Lru<32>>(r, frac, train, B);
  if (kind == 1) o = new Emb<mpe::Int8Rowwise, mpe::Lru<32>>(r, frac, train, B);
  if (kind == 2) o = new Emb<mpe::Int8Rowwise, mpe::Lfu<32>>(r, frac, train, B);
  if (kind == 3) o = new Emb<mpe::Fp16, mpe::Lru<32>>(r, frac, train, B);
  if (kind == 4) o = new Emb<mpe::Int4Rowwise, mpe::Lru<32>>(r, frac, train, B);
  return o;
}
extern "C" __attribute__((visibility("default"))) void pair_run(void* o, const std::int64_t* idx,
                                                                std::int64_t n, const std::int64_t* off,
                                                                std::int64_t m) {
  static thread_local Batch b;
  b.idx.assign(idx, idx + n);
  b.off.assign(off, off + m);
  static_cast<Obj*>(o)->run(b);
}
extern "C" __attribute__((visibility("default"))) void pair_stats(void* o, double* s) {
  static_cast<Obj*>(o)->stats(s);
}
