// SPDX-License-Identifier: Apache-2.0
// Optimizer state precision (mpe/optim/state_precision.hpp): StateFp32, StateBf16,
// StateFp16 against a plain-loop reference, checkpoints of every optimizer x precision,
// refused loads, and the memory the state takes.
//
// The reference is written from state_precision.hpp's documented rules, not from the
// kernels: a plain FP32 table (Fp32 storage holds weights exactly in cache and store, so
// only the state depends on where a row lives), the cache decided by the independent
// CacheSimulator (tests/reference/cache_simulator.hpp), the state of a cached row kept in
// FP32 per slot, rounded into a 16-bit store on a dirty eviction (site 9) and flush (site
// 10), decoded on fill; an uncached row decoded, stepped, and rounded back (site 8). The
// rounding words come from Philox built here from the documented counter; BF16 rounding
// is written here bit by bit; FP16 uses mpe::num::float_to_half (tested against an
// independent IEEE reference in test_numeric.cpp). Every comparison is bit-exact: the
// numerics contract makes every operation correctly rounded, so no tolerance is needed.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <random>
#include <stdexcept>
#include <vector>

#include "io/checkpoint_common.hpp"
#include "reference/cache_simulator.hpp"
#include "reference/embedding_bag.hpp"

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}
float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

/// The documented state stream: word k mod 4 of Philox4x32-10 at counter
/// {row_lo, row_hi, step, site << 24 | k / 4}, key (seed_lo, seed_hi).
std::uint32_t state_word(std::uint64_t seed, std::int64_t row, std::uint32_t step, std::uint32_t site,
                         std::int64_t k) {
  const mpe::num::Uint4 c{static_cast<std::uint32_t>(row),
                          static_cast<std::uint32_t>(static_cast<std::uint64_t>(row) >> 32), step,
                          (site << 24) | static_cast<std::uint32_t>(k / 4)};
  const mpe::num::Uint4 o =
      mpe::num::philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::uint32_t w[4] = {o.x, o.y, o.z, o.w};
  return w[k % 4];
}

/// BF16 rounding written from its definition: keep the top 16 bits of the binary32
/// pattern; the dropped 16 bits are the fraction f of one BF16 ulp. Stochastic: round the
/// magnitude up iff u < f with u = (word >> 8) / 2^24; nearest: half to even. A result
/// beyond the largest finite BF16 saturates to it.
std::uint16_t ref_bf16(float x, bool stochastic, std::uint32_t word) {
  const std::uint32_t b = bits_of(x), sign = b & 0x80000000u, mag = b & 0x7fffffffu;
  std::uint32_t hi = mag >> 16;
  const std::uint32_t low = mag & 0xffffu;
  const bool up = stochastic ? (word >> 8) < (low << 8) : (low > 0x8000u || (low == 0x8000u && (hi & 1u)));
  if (up) ++hi;
  if (hi >= 0x7f80u) hi = 0x7f7fu;
  return static_cast<std::uint16_t>((sign >> 16) | hi);
}

enum class Prec { Fp32, Bf16, Fp16 };
template <class P>
constexpr Prec prec_of() {
  return P::format == mpe::StateFormat::Bf16   ? Prec::Bf16
         : P::format == mpe::StateFormat::Fp16 ? Prec::Fp16
                                               : Prec::Fp32;
}

enum class OptKind { RowwiseAdagrad, Adagrad, Adam };
constexpr float kLr = 0.05f, kEps = 1e-6f, kB1 = 0.9f, kB2 = 0.999f;

/// Plain-loop model of a CachedEmbedding<Fp32, Lru<W>, R, HostBackend, P>'s state.
struct Reference {
  Prec prec;
  bool stochastic;
  std::uint64_t seed;
  std::int64_t S;
  std::vector<std::uint32_t> store;               // (rows, S) stored bit patterns (FP32 bits or 16-bit)
  std::vector<std::vector<float>> slot_state;     // FP32 state of each cache slot's row
  std::int64_t dirty_evictions = 0, refills = 0;  // coverage of the test
  std::map<std::int64_t, int> evicted_dirty;      // rows whose state was written back by an eviction

  std::uint32_t encode(float x, std::int64_t row, std::uint32_t step, std::uint32_t site,
                       std::int64_t k) const {
    if (prec == Prec::Fp32) return bits_of(x);
    const std::uint32_t w = stochastic ? state_word(seed, row, step, site, k) : 0;
    if (prec == Prec::Bf16) return ref_bf16(x, stochastic, w);
    return stochastic ? mpe::num::float_to_half<mpe::StochasticRounding>(x, w).bits
                      : mpe::num::float_to_half<mpe::NearestRounding>(x, w).bits;
  }
  float decode(std::uint32_t v) const {
    if (prec == Prec::Fp32) return float_of(v);
    if (prec == Prec::Bf16) return float_of(v << 16);
    return mpe::num::half_to_float(static_cast<std::uint16_t>(v));
  }
  std::vector<float> decode_row(std::int64_t r) const {
    std::vector<float> v(static_cast<std::size_t>(S));
    for (std::int64_t k = 0; k < S; ++k)
      v[static_cast<std::size_t>(k)] = decode(store[static_cast<std::size_t>(r * S + k)]);
    return v;
  }
  void encode_row(std::int64_t r, const std::vector<float>& v, std::uint32_t step, std::uint32_t site) {
    for (std::int64_t k = 0; k < S; ++k)
      store[static_cast<std::size_t>(r * S + k)] = encode(v[static_cast<std::size_t>(k)], r, step, site, k);
  }
  /// A populate changed the simulator's tags: dirty victims write their state back (site
  /// 9), filled slots decode theirs.
  void populated(const std::vector<std::int64_t>& old_tags, const std::vector<std::uint8_t>& old_dirty,
                 const std::vector<std::int64_t>& tags, std::uint32_t step) {
    for (std::size_t s = 0; s < tags.size(); ++s) {
      if (old_tags[s] == tags[s]) continue;
      if (old_tags[s] >= 0 && old_dirty[s]) {
        encode_row(old_tags[s], slot_state[s], step, 9);
        ++dirty_evictions;
        evicted_dirty[old_tags[s]] = 1;
      }
      if (tags[s] >= 0) {
        slot_state[s] = decode_row(tags[s]);
        if (evicted_dirty.count(tags[s])) ++refills;
      }
    }
  }
};

/// One row's step written plainly: state st (S floats) updated in place, returns u (w -= u).
std::vector<float> plain_step(OptKind k, std::vector<float>& st, const std::vector<float>& g,
                              std::uint64_t t) {
  const auto D = g.size();
  std::vector<float> u(D);
  if (k == OptKind::RowwiseAdagrad) {
    std::vector<float> sq(D);
    for (std::size_t d = 0; d < D; ++d) sq[d] = g[d] * g[d];
    st[0] = st[0] + ref::pairwise_sum(sq) / static_cast<float>(D);
    const float m = kLr / (std::sqrt(st[0]) + kEps);
    for (std::size_t d = 0; d < D; ++d) u[d] = m * g[d];
  } else if (k == OptKind::Adagrad) {
    for (std::size_t d = 0; d < D; ++d) {
      st[d] = st[d] + g[d] * g[d];
      u[d] = (kLr * g[d]) / (std::sqrt(st[d]) + kEps);
    }
  } else {
    auto power = [](float x, std::uint64_t n) {
      float r = 1.0f;
      for (; n > 0; n >>= 1, x = x * x) {
        if (n & 1u) r = r * x;
      }
      return r;
    };
    const float c1 = 1.0f - power(kB1, t), c2 = 1.0f - power(kB2, t);
    for (std::size_t d = 0; d < D; ++d) {
      st[d] = kB1 * st[d] + (1.0f - kB1) * g[d];
      st[D + d] = kB2 * st[D + d] + (1.0f - kB2) * (g[d] * g[d]);
      u[d] = (kLr * (st[d] / c1)) / (std::sqrt(st[D + d] / c2) + kEps);
    }
  }
  return u;
}

template <class E>
void backward_with(E& e, OptKind k, const std::vector<float>& grad) {
  if (k == OptKind::RowwiseAdagrad) e.backward(grad, mpe::RowwiseAdagrad{kLr, kEps});
  if (k == OptKind::Adagrad) e.backward(grad, mpe::Adagrad{kLr, kEps});
  if (k == OptKind::Adam) e.backward(grad, mpe::Adam{kLr, kB1, kB2, kEps});
}

const std::vector<std::int64_t> kTables{30, 17};
constexpr std::int64_t kBatch = 6;

/// 40 steps of E = CachedEmbedding<Fp32, Lru<2>, R, HostBackend, P> (a prefetch before
/// every 4th forward, a flush after every 7th step) against the Reference; weights compared
/// bit for bit after every step, the stored and cached state at the end.
template <class P, class R>
void run_reference(OptKind kind, std::int64_t cache_rows, int D) {
  CAPTURE(static_cast<int>(kind));
  CAPTURE(cache_rows);
  CAPTURE(D);
  using E = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<2>, R, mpe::HostBackend, P>;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = D;
  cfg.cache_rows = cache_rows;
  cfg.seed = 0x1234567890abcdefull;
  E emb(cfg);
  ref::EmbeddingBag bag(kTables, D);
  std::mt19937_64 rng(77 + static_cast<std::uint64_t>(cache_rows) + static_cast<std::uint64_t>(kind));
  bag.weights() = ref::random_floats(rng, bag.weights().size(), -1.0f, 1.0f);
  emb.set_weights(bag.weights());
  const std::int64_t rows = bag.total_rows();
  const std::int64_t S = kind == OptKind::RowwiseAdagrad ? 1 : kind == OptKind::Adagrad ? D : 2 * D;
  Reference ref{prec_of<P>(), R::stochastic, cfg.seed, S, {}, {}, 0, 0, {}};
  ref.store.assign(static_cast<std::size_t>(rows * S), 0u);  // zeros decode to 0 in every precision
  mpe_test::CacheSimulator sim(mpe_test::SimPolicy::Lru, 2, rows, cache_rows, 4 * D);
  ref.slot_state.assign(static_cast<std::size_t>(sim.slots()),
                        std::vector<float>(static_cast<std::size_t>(S), 0.0f));
  std::vector<float> got(bag.weights().size());
  for (std::uint32_t k = 0; k < 40; ++k) {
    CAPTURE(k);
    const ref::Batch b = ref::random_batch(rng, kTables, kBatch, 4, false);
    std::vector<std::int64_t> grows;
    for (std::int64_t j = 0; j + 1 < static_cast<std::int64_t>(b.offsets.size()); ++j) {
      for (auto i = b.offsets[static_cast<std::size_t>(j)]; i < b.offsets[static_cast<std::size_t>(j + 1)];
           ++i) {
        grows.push_back(bag.first_row(j / kBatch) + b.indices[static_cast<std::size_t>(i)]);
      }
    }
    std::vector<float> out(static_cast<std::size_t>(kBatch) * kTables.size() * static_cast<std::size_t>(D));
    const auto populate = [&](bool prefetch) {
      const auto old_tags = sim.tags();
      const auto old_dirty = sim.dirty();
      if (prefetch) {
        sim.prefetch(grows);
      } else {
        sim.forward(grows);
      }
      ref.populated(old_tags, old_dirty, sim.tags(), k);
    };
    if (k % 4 == 1) {
      emb.prefetch(b.indices, b.offsets);
      populate(true);
    }
    emb.forward(b.indices, b.offsets, out);
    populate(false);
    const std::vector<float> grad = ref::random_floats(rng, out.size(), -1.0f, 1.0f);
    backward_with(emb, kind, grad);
    for (const auto& [r, g] : bag.row_gradients(b, mpe::Pooling::Sum, grad)) {
      const std::int64_t s = sim.find(r);
      std::vector<float> st = s >= 0 ? ref.slot_state[static_cast<std::size_t>(s)] : ref.decode_row(r);
      const std::vector<float> u = plain_step(kind, st, g, k + 1);
      float* w = &bag.weights()[static_cast<std::size_t>(r * D)];
      for (int d = 0; d < D; ++d) w[d] = w[d] - u[static_cast<std::size_t>(d)];
      if (s >= 0) {
        ref.slot_state[static_cast<std::size_t>(s)] = st;
      } else {
        ref.encode_row(r, st, k, 8);
      }
    }
    sim.backward();
    if (k % 7 == 6) {
      emb.flush();
      for (std::size_t s = 0; s < sim.tags().size(); ++s) {
        if (sim.tags()[s] >= 0 && sim.dirty()[s]) ref.encode_row(sim.tags()[s], ref.slot_state[s], k + 1, 10);
      }
      sim.flush();
    }
    emb.get_weights(got);
    REQUIRE(ref::first_diff(got, bag.weights()) == -1);
  }
  // The stored state, and the FP32 state of every occupied slot, bit for bit.
  const mpe::TableState state = emb.state();
  const std::size_t vb = P::value_bytes;
  REQUIRE(state.optimizer_state.size() == static_cast<std::size_t>(rows * S) * vb);
  // StateFp32 keeps no cached copy: its array holds every row's latest state, which for a
  // row cached in the model is the FP32 slot state (the same bits a write-back would store).
  std::vector<std::uint32_t> expect = ref.store;
  if (!P::cached) {
    for (std::int64_t s = 0; s < sim.slots(); ++s) {
      const std::int64_t r = sim.tags()[static_cast<std::size_t>(s)];
      if (r < 0) continue;
      for (std::int64_t k = 0; k < S; ++k)
        expect[static_cast<std::size_t>(r * S + k)] =
            bits_of(ref.slot_state[static_cast<std::size_t>(s)][static_cast<std::size_t>(k)]);
    }
  }
  bool store_equal = true;
  for (std::int64_t i = 0; i < rows * S; ++i) {
    std::uint32_t v = 0;
    std::memcpy(&v, state.optimizer_state.data() + static_cast<std::size_t>(i) * vb, vb);
    store_equal = store_equal && v == expect[static_cast<std::size_t>(i)];
  }
  CHECK(store_equal);
  if (P::cached && cache_rows > 0) {
    const std::span<const float> c = state.cached_optimizer_state;
    REQUIRE(c.size() == static_cast<std::size_t>(sim.slots() * S));
    bool cache_equal = true;
    for (std::int64_t s = 0; s < sim.slots(); ++s) {
      if (sim.tags()[static_cast<std::size_t>(s)] < 0) continue;
      cache_equal =
          cache_equal && std::memcmp(c.data() + s * S, ref.slot_state[static_cast<std::size_t>(s)].data(),
                                     static_cast<std::size_t>(S) * 4) == 0;
    }
    CHECK(cache_equal);
    // the run moved state with rows: dirty evictions, and evicted rows filled again
    CHECK(ref.dirty_evictions > 0);
    CHECK(ref.refills > 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("state precision: training matches the plain-loop reference bit for bit", P,
                   mpe::StateFp32, mpe::StateBf16, mpe::StateFp16) {
  for (OptKind kind : {OptKind::RowwiseAdagrad, OptKind::Adagrad, OptKind::Adam}) {
    for (std::int64_t cache_rows : {0, 8}) {
      run_reference<P, mpe::StochasticRounding>(kind, cache_rows, 5);
    }
  }
  run_reference<P, mpe::NearestRounding>(OptKind::Adam, 8, 3);
}

TEST_CASE("state precision: BF16 reference rounding agrees with the documented rules on known values") {
  // 1 + 2^-8 + 2^-9 (low bits 0xC000: 3/4 of an ulp): nearest rounds up; stochastic rounds
  // up iff u < 3/4.
  const float x = 1.0f + 0x1p-8f + 0x1p-9f;
  CHECK(ref_bf16(x, false, 0) == 0x3f81u);
  CHECK(ref_bf16(x, true, 0) == 0x3f81u);                   // u = 0
  CHECK(ref_bf16(x, true, 0xC0000000u - 256u) == 0x3f81u);  // u just below 3/4
  CHECK(ref_bf16(x, true, 0xC0000000u) == 0x3f80u);         // u = 3/4
  CHECK(ref_bf16(-x, true, 0xffffffffu) == 0xbf80u);        // magnitude rounds down
  CHECK(ref_bf16(0x1.FFFFFEp127f, false, 0) == 0x7f7fu);    // saturates, never inf
  // and mpe's encoder gives the same bits as the reference for a spread of values
  const mpe::num::RowRng rng{5, 3, 2, mpe::num::RoundingSite::StateUpdate};
  std::vector<float> src(64);
  std::mt19937_64 g(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto& v : src) v = u(g) * std::ldexp(1.0f, static_cast<int>(g() % 40) - 20);
  std::vector<std::uint8_t> out(2 * src.size());
  mpe::num::encode_state<mpe::StochasticRounding>(mpe::StateFormat::Bf16, src.data(), 64, out.data(), rng);
  bool same = true;
  for (std::int64_t k = 0; k < 64; ++k) {
    std::uint16_t h;
    std::memcpy(&h, out.data() + 2 * k, 2);
    same = same && h == ref_bf16(src[static_cast<std::size_t>(k)], true, state_word(5, 3, 2, 8, k));
  }
  CHECK(same);
}

namespace {
template <class O>
struct OptCase {
  using type = O;
};
template <class Opt>
Opt make_opt() {
  if constexpr (std::is_same_v<Opt, mpe::Sgd>) {
    return mpe::Sgd{0.1f};
  } else if constexpr (std::is_same_v<Opt, mpe::RowwiseAdagrad>) {
    return mpe::RowwiseAdagrad{0.1f};
  } else if constexpr (std::is_same_v<Opt, mpe::Adagrad>) {
    return mpe::Adagrad{0.1f};
  } else {
    return mpe::Adam{0.01f};
  }
}

/// Round trip of one optimizer x precision at D: 4 pipelined steps, save, load into a fresh
/// object (another seed), then 20 more steps on both give the same bits as the run that
/// never stopped (weights, stats, every saved section including the cached FP32 state).
template <class P, class Opt>
void check_precision_resume(std::int32_t D) {
  CAPTURE(D);
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::HostBackend, P>;
  const Opt opt = make_opt<Opt>();
  mpe::EmbeddingConfig c;
  c.table_rows = {9, 4};
  c.dim = D;
  c.cache_rows = 4;
  c.seed = 11;
  const auto path = ckt::temp_dir(std::string("precision_") + P::name) / "p.ckpt";
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  const ckt::Batch first = ckt::make_batch(c, 3, 0);
  a.prefetch(first.indices, first.offsets);
  for (std::uint64_t k = 0; k < 4; ++k) ckt::pipelined_step(a, k, opt, 3);
  a.save(path);
  const std::vector<std::uint8_t> file = ckt::read_bytes(path);
  std::uint32_t version;
  std::memcpy(&version, file.data() + 8, 4);
  CHECK(version == 4u);  // every precision writes version 4 (FP32: an empty optimizer_cache)
  mpe::EmbeddingConfig other = c;
  other.seed = 99;
  E b(other);
  b.load(path);
  CHECK(ckt::snapshot(a) == ckt::snapshot(b));
  const std::int64_t S = mpe::OptimizerRule<Opt>::state_floats(D);
  const std::size_t cached = P::cached && S > 0 ? 4u * static_cast<std::size_t>(S) * 4u : 0u;  // 4 slots
  CHECK(b.memory().optimizer_bytes == static_cast<std::size_t>(13 * S) * P::value_bytes + cached);
  bool outputs_equal = true;
  for (std::uint64_t k = 4; k < 24; ++k) {
    outputs_equal =
        ckt::same_bits(ckt::pipelined_step(a, k, opt, 3), ckt::pipelined_step(b, k, opt, 3)) && outputs_equal;
  }
  CHECK(outputs_equal);
  CHECK(ckt::same_bits(ckt::weights(a), ckt::weights(b)));
  CHECK(ckt::same_stats(a.stats(), b.stats()));
  CHECK(ckt::snapshot(a) == ckt::snapshot(b));
}
}  // namespace

TEST_CASE_TEMPLATE(
    "state precision: every optimizer x precision resumes exactly from a checkpoint, D up to 4096", P,
    mpe::StateFp32, mpe::StateBf16, mpe::StateFp16) {
  for (std::int32_t D : {1, 3, 64, 4096}) {
    check_precision_resume<P, mpe::Sgd>(D);
    check_precision_resume<P, mpe::RowwiseAdagrad>(D);
    check_precision_resume<P, mpe::Adagrad>(D);
    check_precision_resume<P, mpe::Adam>(D);
  }
}

TEST_CASE("state precision: a checkpoint of another precision is refused, naming both, nothing changed") {
  using Bf = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::HostBackend,
                                  mpe::StateBf16>;
  using Fp = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::HostBackend,
                                  mpe::StateFp16>;
  using F32 = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto dir = ckt::temp_dir("precision_mismatch");
  const mpe::EmbeddingConfig c = ckt::small_config(5);
  Bf a(c);
  a.init_uniform(-0.5f, 0.5f);
  for (std::uint64_t k = 0; k < 3; ++k) ckt::train_step(a, k, mpe::Adam{0.01f});
  a.save(dir / "bf16.ckpt");
  F32 f(c);
  f.init_uniform(-0.5f, 0.5f);
  ckt::train_step(f, 0, mpe::Adam{0.01f});
  f.save(dir / "fp32.ckpt");

  Fp b(c);  // trained a little: load must leave all of it as it was
  b.init_uniform(-0.25f, 0.25f);
  ckt::train_step(b, 0, mpe::Adam{0.01f});
  const auto before = ckt::snapshot(b);
  CHECK_THROWS_WITH_AS(b.load(dir / "bf16.ckpt"),
                       doctest::Contains("optimizer state precision 'bf16' in file, 'fp16' here"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(b.load(dir / "fp32.ckpt"),
                       doctest::Contains("optimizer state precision 'fp32' in file, 'fp16' here"),
                       std::invalid_argument);
  CHECK(ckt::snapshot(b) == before);
  CHECK_THROWS_WITH_AS(f.load(dir / "bf16.ckpt"),
                       doctest::Contains("optimizer state precision 'bf16' in file, 'fp32' here"),
                       std::invalid_argument);
  Bf ok(c);
  ok.load(dir / "bf16.ckpt");
  CHECK(ckt::snapshot(ok) == ckt::snapshot(a));
}

TEST_CASE("state precision: load refuses a stored or cached state value outside the optimizer's domain") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::HostBackend,
                                 mpe::StateBf16>;
  namespace fmt = mpe::io::checkpoint;
  mpe::EmbeddingConfig c;
  c.table_rows = {10};
  c.dim = 4;
  c.cache_rows = 4;
  const auto dir = ckt::temp_dir("precision_domain");
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  ckt::train_step(a, 1, mpe::RowwiseAdagrad{0.1f}, 3);
  a.save(dir / "a.ckpt");
  const std::vector<std::uint8_t> good = ckt::read_bytes(dir / "a.ckpt");
  // Walk the documented layout to the payloads of 'optimizer' and 'optimizer_cache'.
  std::uint32_t H;
  std::memcpy(&H, good.data() + 12, 4);
  std::size_t p = H;
  std::vector<std::size_t> at, len;
  for (std::uint32_t i = 0; i < fmt::kNumSections; ++i) {
    std::uint16_t n;
    std::memcpy(&n, good.data() + p, 2);
    p += 2 + n;
    std::uint64_t l;
    std::memcpy(&l, good.data() + p, 8);
    p += 8;
    at.push_back(p);
    len.push_back(static_cast<std::size_t>(l));
    p += l + 4;
  }
  REQUIRE(len[6] == 10 * 2);     // 10 rows x 1 BF16 value
  REQUIRE(len[8] == 4 * 1 * 4);  // 4 slots x 1 FP32 value
  const auto resign = [&](std::vector<std::uint8_t>& b, std::size_t sec) {
    const std::uint32_t crc = fmt::crc32c(b.data() + at[sec], len[sec]);
    std::memcpy(b.data() + at[sec] + len[sec], &crc, 4);
    const std::uint32_t file_crc = fmt::crc32c(b.data(), b.size() - 4);
    std::memcpy(b.data() + b.size() - 4, &file_crc, 4);
  };
  auto bad_store = good;
  const std::uint16_t minus_one = 0xbf80;  // BF16 -1.0: a negative Adagrad accumulator
  std::memcpy(bad_store.data() + at[6] + 2 * 7, &minus_one, 2);
  resign(bad_store, 6);
  ckt::write_bytes(dir / "bad_store.ckpt", bad_store);
  E b(c);
  const auto before = ckt::snapshot(b);
  CHECK_THROWS_WITH_AS(b.load(dir / "bad_store.ckpt"),
                       doctest::Contains("section 'optimizer': row 7 holds rowwise_adagrad state [-1]"),
                       mpe::checkpoint_error);
  // an occupied slot's FP32 state: NaN
  std::size_t occupied = 4;
  for (std::size_t s = 0; s < 4; ++s) {
    std::int64_t tag;
    std::memcpy(&tag, good.data() + at[2] + 8 * s, 8);
    if (tag >= 0) occupied = s;
  }
  REQUIRE(occupied < 4);
  auto bad_cache = good;
  const float nan = std::nanf("");
  std::memcpy(bad_cache.data() + at[8] + 4 * occupied, &nan, 4);
  resign(bad_cache, 8);
  ckt::write_bytes(dir / "bad_cache.ckpt", bad_cache);
  const std::string cache_msg = "section 'optimizer_cache': slot " + std::to_string(occupied);
  CHECK_THROWS_WITH_AS(b.load(dir / "bad_cache.ckpt"), doctest::Contains(cache_msg.c_str()),
                       mpe::checkpoint_error);
  CHECK(ckt::snapshot(b) == before);
  b.load(dir / "a.ckpt");
  CHECK(ckt::snapshot(b) == ckt::snapshot(a));
}

TEST_CASE_TEMPLATE("state precision: memory() reports the state bytes of each precision exactly", P,
                   mpe::StateFp32, mpe::StateBf16, mpe::StateFp16) {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding, mpe::HostBackend, P>;
  for (std::int64_t cache_rows : {0, 8}) {
    CAPTURE(cache_rows);
    mpe::EmbeddingConfig c;
    c.table_rows = {50, 13};  // 63 rows
    c.dim = 16;
    c.cache_rows = cache_rows;
    E adam(c), rowwise(c);
    CHECK(adam.memory().optimizer_bytes == 0);
    ckt::train_step(adam, 0, mpe::Adam{0.01f});
    ckt::train_step(rowwise, 0, mpe::RowwiseAdagrad{0.1f});
    const std::size_t slots = static_cast<std::size_t>(cache_rows);  // 2 sets x 4 ways
    const std::size_t cached = P::cached ? slots : 0;
    // Adam: 2D = 32 values per row; RowwiseAdagrad: 1
    CHECK(adam.memory().optimizer_bytes == 63 * 32 * P::value_bytes + cached * 32 * 4);
    CHECK(rowwise.memory().optimizer_bytes == 63 * 1 * P::value_bytes + cached * 1 * 4);
    CHECK(adam.memory().cache_bytes == rowwise.memory().cache_bytes);  // the row cache is unchanged
  }
}

TEST_CASE("state precision: set_weights keeps a dropped dirty row's state (rounded at site StateDrop)") {
  using E =
      mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<2>, mpe::StochasticRounding, mpe::HostBackend, mpe::StateBf16>;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = kTables;
  cfg.dim = 5;
  cfg.cache_rows = 8;
  cfg.seed = 4242;
  E emb(cfg);
  emb.init_uniform(-0.5f, 0.5f);
  std::mt19937_64 rng(9);
  for (int k = 0; k < 3; ++k) {
    const ref::Batch b = ref::random_batch(rng, kTables, kBatch, 4, false);
    std::vector<float> out(static_cast<std::size_t>(kBatch) * kTables.size() * 5);
    emb.forward(b.indices, b.offsets, out);
    emb.backward(ref::random_floats(rng, out.size(), -1.0f, 1.0f), mpe::Adam{0.01f});
  }
  const mpe::CacheRef c = emb.cache_ref();
  std::int64_t dirty_slot = -1;
  for (std::int64_t s = 0; s < c.slots(); ++s) {
    if (c.tags[s] >= 0 && c.dirty[s] && dirty_slot < 0) dirty_slot = s;
  }
  REQUIRE(dirty_slot >= 0);
  const std::int64_t r = c.tags[dirty_slot], S = 10;  // Adam at D = 5
  std::vector<float> cached(static_cast<std::size_t>(S));
  std::memcpy(cached.data(), emb.state().cached_optimizer_state.data() + dirty_slot * S, 4 * S);
  const auto step = static_cast<std::uint32_t>(emb.step());
  emb.flush();  // every row clean: the next drop of a clean row must leave its state alone
  const std::span<const std::uint8_t> opt_state = emb.state().optimizer_state;
  const auto* store = opt_state.data();
  std::vector<std::uint8_t> after_flush(store, store + opt_state.size());
  // make row r dirty again with a known FP32 state: one more step touching only row r
  const std::int64_t t = r < kTables[0] ? 0 : 1, local = r - (t == 0 ? 0 : kTables[0]);
  std::vector<std::int64_t> idx{local}, off(static_cast<std::size_t>(2 * 1 + 1), 0);
  for (std::size_t j = static_cast<std::size_t>(t) + 1; j < off.size(); ++j) off[j] = 1;
  std::vector<float> out(2 * 5);
  emb.forward(idx, off, out);
  REQUIRE(emb.cache_ref().find(r) == dirty_slot);
  emb.backward(std::vector<float>(10, 0.25f), mpe::Adam{0.01f});
  REQUIRE(emb.cache_ref().dirty[dirty_slot] == 1);
  std::memcpy(cached.data(), emb.state().cached_optimizer_state.data() + dirty_slot * S, 4 * S);
  const auto step2 = static_cast<std::uint32_t>(emb.step());
  CHECK(step2 == step + 1);
  const std::vector<float> zeros(5, 0.0f);
  emb.set_weights(zeros, r);
  CHECK(emb.cache_ref().find(r) == -1);
  bool same = true;
  for (std::int64_t k = 0; k < S; ++k) {
    std::uint16_t h;
    std::memcpy(&h, store + 2 * (r * S + k), 2);
    same = same &&
           h == ref_bf16(cached[static_cast<std::size_t>(k)], true, state_word(cfg.seed, r, step2, 11, k));
  }
  CHECK(same);
  // every other row's stored state is as the flush left it
  bool others = true;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(after_flush.size()); ++i) {
    if (i / (2 * S) == r) continue;
    others = others && store[i] == after_flush[static_cast<std::size_t>(i)];
  }
  CHECK(others);
}

TEST_CASE("state precision: a compact state rounding that saturates counts its row in saturated_rows") {
  // Row-wise Adagrad's accumulator G = mean(g^2) with g = 300 is 90000, beyond FP16's
  // 65504: every write of such a row's state into the FP16 store saturates. Weights are
  // Fp32 and the update lr * g / (sqrt(G) + eps) is small, so no weight saturates: every
  // count below comes from the state. Expected counts are the rows written, by hand.
  // One set of 32 ways holds the whole table when cached: no conflict, no eviction.
  using E =
      mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<32>, mpe::NearestRounding, mpe::HostBackend, mpe::StateFp16>;
  const std::vector<std::int64_t> idx{0, 1, 2, 3, 3}, off{0, 3, 5};  // 2 bags, unique rows {0, 1, 2, 3}
  const std::vector<std::int64_t> idx_small{5, 6}, off_small{0, 1, 2};
  constexpr std::int32_t D = 4;
  for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{32}}) {
    CAPTURE(cache_rows);
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {20};
    cfg.dim = D;
    cfg.cache_rows = cache_rows;
    cfg.seed = 5;
    E emb(cfg);
    emb.init_uniform(-0.5f, 0.5f);
    std::vector<float> out(2 * D);
    emb.forward(idx, off, out);
    emb.backward(std::vector<float>(2 * D, 300.0f), mpe::RowwiseAdagrad{0.01f});
    // uncached: 4 rows rounded into the store at the update; cached: held in FP32 slots
    CHECK(emb.stats().saturated_rows == (cache_rows == 0 ? 4u : 0u));
    emb.forward(idx_small, off_small, out);  // rows 5 and 6: G = 1, nothing saturates
    emb.backward(std::vector<float>(2 * D, 1.0f), mpe::RowwiseAdagrad{0.01f});
    CHECK(emb.stats().saturated_rows == (cache_rows == 0 ? 4u : 0u));
    emb.flush();  // cached: the 4 hot rows' states are rounded into the store now
    CHECK(emb.stats().saturated_rows == 4u);
  }
}

TEST_CASE(
    "#40 item 4: a dropped dirty row whose state saturates counts in saturated_rows (set_weights, init, "
    "import)") {
  // As above: G = 90000 is beyond FP16, held in the cache's FP32 slots until the row is
  // written back. set_weights, init_uniform and import_table drop the 4 hot dirty rows'
  // lines and round their state into the store (site StateDrop): 4 saturated rows, as a
  // flush counts them.
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<32>, mpe::NearestRounding, mpe::HostBackend,
                                 mpe::StateFp16>;
  const std::vector<std::int64_t> idx{0, 1, 2, 3, 3}, off{0, 3, 5};
  constexpr std::int32_t D = 4;
  for (int op = 0; op < 4; ++op) {
    CAPTURE(op);
    mpe::EmbeddingConfig cfg;
    cfg.table_rows = {20};
    cfg.dim = D;
    cfg.cache_rows = 32;
    cfg.seed = 5;
    E emb(cfg);
    emb.init_uniform(-0.5f, 0.5f);
    const std::vector<std::uint8_t> exported = mpe::io::export_table(emb, 0, mpe::interop::FbgemmFused{});
    std::vector<float> out(2 * D);
    emb.forward(idx, off, out);
    emb.backward(std::vector<float>(2 * D, 300.0f), mpe::RowwiseAdagrad{0.01f});
    REQUIRE(emb.stats().saturated_rows == 0u);  // held in FP32 slots
    if (op == 0) emb.set_weights(std::vector<float>(20 * D, 0.25f));
    if (op == 1) emb.set_weights(std::vector<float>(2 * D, 0.25f), 2);  // rows 2, 3 only
    if (op == 2) emb.init_uniform(-0.1f, 0.1f);
    if (op == 3) CHECK(mpe::io::import_table(emb, 0, mpe::interop::FbgemmFused{}, exported) == 0);
    CHECK(emb.stats().saturated_rows == (op == 1 ? 2u : 4u));
    emb.flush();  // nothing dirty is left to count again
    CHECK(emb.stats().saturated_rows == 4u);
  }
}
