// SPDX-License-Identifier: Apache-2.0
// memory() against DESIGN.md's formulas; D up to 4096; 64-bit row and slot arithmetic
// for tables past 2^31 rows (checked on the per-item functors with a fake base pointer,
// without allocating such a table).
#include <doctest/doctest.h>

#include <cstdint>
#include <mpe/mpe.hpp>
#include <random>
#include <type_traits>

#include "reference/embedding_bag.hpp"

namespace {

template <class S, class C>
struct Policy {
  using storage = S;
  using cache = C;
};

/// Bytes of one row per DESIGN.md's format table, padded to `align`.
template <class S>
std::size_t design_row_bytes(std::size_t D, std::size_t align) {
  std::size_t b = 0;
  if constexpr (std::is_same_v<S, mpe::Fp32>) b = 4 * D;
  if constexpr (std::is_same_v<S, mpe::Fp16>) b = 2 * D;
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) b = D + 8;
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) b = (D + 1) / 2 + 4;
  if constexpr (std::is_same_v<S, mpe::Int2Rowwise>) b = (D + 3) / 4 + 4;
  return (b + align - 1) / align * align;
}

}  // namespace

TEST_CASE_TEMPLATE("memory() follows the formulas", P, Policy<mpe::Fp32, mpe::Lru<4>>,
                   Policy<mpe::Fp16, mpe::DirectMapped>, Policy<mpe::Int8Rowwise, mpe::Lfu<4>>,
                   Policy<mpe::Int4Rowwise, mpe::Lru<4>>, Policy<mpe::Int2Rowwise, mpe::SecondTouchLru<4>>) {
  using S = typename P::storage;
  using C = typename P::cache;
  for (const int D : {1, 7, 64}) {
    for (const int align : {1, 4, 64}) {
      for (const std::int64_t cache_rows : {0, 8, 10, 100000}) {
        CAPTURE(D);
        CAPTURE(align);
        CAPTURE(cache_rows);
        mpe::EmbeddingConfig cfg;
        cfg.table_rows = {100, 3, 50};
        cfg.dim = D;
        cfg.cache_rows = cache_rows;
        cfg.row_alignment = align;
        mpe::CachedEmbedding<S, C, mpe::NearestRounding> emb(cfg);
        const std::size_t rows = 153, W = C::ways;
        const std::size_t rb =
            design_row_bytes<S>(static_cast<std::size_t>(D), static_cast<std::size_t>(align));
        CHECK(emb.store_row_bytes() == rb);
        CHECK(mpe::row_bytes<S>(D, align) == rb);
        // cache sets = floor(min(cache_rows, rows rounded up to Ways) / Ways)
        const std::size_t C_rows =
            std::min<std::size_t>(static_cast<std::size_t>(cache_rows), (rows + W - 1) / W * W);
        const std::size_t slots = C_rows / W * W;
        CHECK(static_cast<std::size_t>(emb.cache_slots()) == slots);
        // LFU sketch: 4 lines of 32-bit counters, width the smallest power of two
        // >= max(16, 2 * slots)
        std::size_t sketch = 0;
        if (C::uses_sketch && slots > 0) {
          std::size_t width = 16;
          while (width < 2 * slots) width *= 2;
          sketch = 4 * width * sizeof(std::uint32_t);
        }
        // Second-touch doorkeeper: the smallest power of two >= max(32, slots) u32 words.
        if (requires { requires C::uses_doorkeeper; } && slots > 0) {
          std::size_t words = 32;
          while (words < slots) words *= 2;
          sketch = words * sizeof(std::uint32_t);
        }
        mpe::MemoryFootprint m = emb.memory();
        CHECK(m.store_bytes == rows * rb);
        // FP32 row + tag (int64) + last-use score (uint64) + dirty byte per slot, + sketch
        CHECK(m.cache_bytes == slots * (static_cast<std::size_t>(D) * 4 + 8 + 8 + 1) + sketch);
        CHECK(m.optimizer_bytes == 0);
        // table offsets (T + 1) and the statistics/step counters kept in backend memory
        CHECK(m.metadata_bytes == (3 + 1) * sizeof(std::int64_t) + sizeof(mpe::detail::Counters));
        CHECK(m.total() ==
              m.store_bytes + m.cache_bytes + m.optimizer_bytes + m.metadata_bytes + m.workspace_bytes);
        CHECK(m.embedding_bytes() == m.store_bytes + m.cache_bytes + m.metadata_bytes);

        // a batch: workspace grows, optimizer state appears with the first Adagrad step
        const std::vector<std::int64_t> idx{5, 5, 99, 2, 49, 0};
        const std::vector<std::int64_t> off{0, 3, 4, 6};
        std::vector<float> out(3 * static_cast<std::size_t>(D));
        emb.forward(idx, off, out);
        CHECK(emb.memory().optimizer_bytes == 0);
        emb.backward(out, mpe::RowwiseAdagrad{0.01f});
        m = emb.memory();
        CHECK(m.optimizer_bytes == rows * sizeof(float));
        CHECK(m.store_bytes == rows * rb);
        CHECK(m.cache_bytes == slots * (static_cast<std::size_t>(D) * 4 + 8 + 8 + 1) + sketch);
        CHECK(m.workspace_bytes > 0);
      }
    }
  }
}

TEST_CASE("D = 4096 (one small table): Fp32 and Int8 against the reference") {
  constexpr int D = 4096;
  mpe::EmbeddingConfig cfg;
  cfg.table_rows = {6};
  cfg.dim = D;
  cfg.cache_rows = 4;
  std::mt19937_64 rng(8);
  const auto w0 = ref::random_floats(rng, 6 * D, -1, 1);
  const std::vector<std::int64_t> idx{0, 3, 3, 5, 1, 2};
  const std::vector<std::int64_t> off{0, 4, 6};
  ref::Batch b;
  b.B = 2;
  b.indices = idx;
  b.offsets = off;
  const auto g = ref::random_floats(rng, 2 * D, -1, 1);

  ref::EmbeddingBag bag({6}, D);
  bag.weights() = w0;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding> f(cfg);
  f.set_weights(w0);
  std::vector<float> out(2 * D), got(6 * D);
  for (int step = 0; step < 3; ++step) {
    f.forward(idx, off, out);
    CHECK(ref::first_diff(out, bag.forward(b, mpe::Pooling::Sum)) == -1);
    f.backward(g, mpe::RowwiseAdagrad{0.1f});
    bag.adagrad(b, mpe::Pooling::Sum, g, 0.1f, 1e-8f);
    f.get_weights(got);
    CHECK(ref::first_diff(got, bag.weights()) == -1);  // Adagrad's pairwise sum over 4096
  }

  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding> q(cfg);
  q.set_weights(w0);
  CHECK(q.store_row_bytes() == 4096 + 8);
  for (int step = 0; step < 3; ++step) {
    q.get_weights(bag.weights());
    q.forward(idx, off, out);
    CHECK(ref::first_diff(out, bag.forward(b, mpe::Pooling::Sum)) == -1);
    q.backward(g, mpe::Sgd{0.1f});
  }
}

TEST_CASE("index types are 64-bit everywhere rows, slots and positions are counted") {
  static_assert(std::is_same_v<mpe::index_t, std::int64_t>);
  static_assert(std::is_same_v<decltype(mpe::CacheRef::tags), std::int64_t*>);
  static_assert(std::is_same_v<decltype(mpe::CacheRef::num_sets), std::int64_t>);
  static_assert(std::is_same_v<decltype(mpe::num::RowRng::row), std::uint64_t>);
  static_assert(std::is_same_v<decltype(mpe::row_bytes<mpe::Int8Rowwise>(1, 4)), std::size_t>);
  // store size for 3e9 rows of Int8 D = 128: (128 + 8) bytes each, no 32-bit wrap
  const std::size_t rows = 3'000'000'000ull;
  CHECK(rows * mpe::row_bytes<mpe::Int8Rowwise>(128, 4) == 408'000'000'000ull);
  CHECK(rows * mpe::row_bytes<mpe::Int4Rowwise>(128, 4) == 204'000'000'000ull);
  // rows past 2^32 draw their own stochastic-rounding stream (row_hi is in the counter)
  const mpe::num::RowRng lo{1, 5, 0, mpe::num::RoundingSite::StoreUpdate};
  const mpe::num::RowRng hi{1, 5 + (1ull << 32), 0, mpe::num::RoundingSite::StoreUpdate};
  CHECK(lo.draw(0).x != hi.draw(0).x);
  // a CacheRef slot past 2^31 floats: row(s) = rows + s * D in 64-bit
  mpe::CacheRef c;
  c.dim = 64;
  CHECK(c.row(40'000'000) - c.rows == 2'560'000'000ll);
}

namespace {
/// A pointer `offset` bytes before `base` (never dereferenced at that address: the
/// functor adds the offset back). Lets a functor address row ~3e9 of a table we do not
/// allocate.
template <class T>
T* shifted(T* base, std::uint64_t offset_bytes) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uintptr_t>(base) - offset_bytes);
}
}  // namespace

TEST_CASE("per-item functors address rows past 2^31 with 64-bit arithmetic") {
  using S = mpe::Int8Rowwise;
  constexpr int D = 16;
  const std::size_t stride = mpe::row_bytes<S>(D, 4);  // 24
  const std::int64_t r0 = 3'000'000'000ll;             // global row ~3e9
  // a real 2-row store, addressed as if it held rows r0 and r0 + 1
  std::vector<std::uint8_t> real(2 * stride, 0);
  std::uint8_t* store = shifted(real.data(), static_cast<std::uint64_t>(r0) * stride);
  mpe::CacheRef no_cache;  // num_sets = 0: every row in the store
  no_cache.dim = D;

  // WriteRows: set rows r0, r0+1 to i + 0.5*d
  std::vector<float> src(2 * D);
  for (int i = 0; i < 2; ++i)
    for (int d = 0; d < D; ++d) src[static_cast<std::size_t>(i * D + d)] = static_cast<float>(i) + 0.5f * d;
  const std::uint64_t step0 = 0;  // completed backward() calls (read for the rounding stream)
  const mpe::detail::WriteRows<S, mpe::NearestRounding> wr{
      no_cache, store, stride, r0, src.data(), 0, &step0, mpe::num::RoundingSite::SetWeights};
  wr(0);
  wr(1);
  // the bytes landed in the real buffer: decode them independently (scale, bias floats)
  float scale1, bias1;
  std::memcpy(&scale1, real.data() + stride + D, 4);
  std::memcpy(&bias1, real.data() + stride + D + 4, 4);
  CHECK(bias1 == 1.0f);
  CHECK(scale1 == 7.5f / 255.0f);

  // ReadRows reads them back
  std::vector<float> out(2 * D);
  const mpe::detail::ReadRows<S> rd{mpe::EmbeddingRef<S>{store, stride, no_cache, nullptr, 0, D}, r0,
                                    out.data()};
  rd(0);
  rd(1);
  for (int d = 0; d < D; ++d) {
    // one Int8 step of each row's range (7.5 / 255) bounds the round trip
    CHECK(std::abs(out[static_cast<std::size_t>(d)] - 0.5f * d) <= 7.5f / 255.0f);
    CHECK(std::abs(out[static_cast<std::size_t>(D + d)] - (1.0f + 0.5f * d)) <= 7.5f / 255.0f);
  }

  // PoolBags: one bag of global rows {r0 + 1, r0}
  const std::vector<std::int64_t> offsets{0, 2};
  const std::vector<std::int64_t> global_rows{r0 + 1, r0};
  std::vector<float> pooled(D);
  const mpe::detail::PoolBags<S> pool{
      offsets.data(), global_rows.data(), nullptr, nullptr, no_cache, store, stride, 1, 1, D,
      false,          pooled.data(),      nullptr};
  pool(0);
  for (int d = 0; d < D; ++d) {
    const auto e = static_cast<std::size_t>(d);
    CHECK(pooled[e] == out[D + e] + out[e]);  // index order: row r0 + 1 first
  }

  // SumRowGradients, AccumulateRows + ApplyRows (backward's passes) on row r0 + 1 with row-wise Adagrad
  // state addressed at r0 + 1
  std::vector<float> state_real(1, 0.0f);
  float* state = shifted(state_real.data(), static_cast<std::uint64_t>(r0 + 1) * sizeof(float));
  const std::vector<std::int64_t> uniq{r0 + 1}, seg{0, 1}, sorted_pos{0}, bag_of{0};
  const std::vector<float> coef{1.0f};
  const std::vector<float> go(D, 1.0f);
  std::vector<float> grad(D), update(2);
  std::vector<std::uint8_t> outcome(1);
  const std::uint64_t step = 0;
  const std::int64_t one = 1;  // unique rows
  mpe::detail::CallRecord rec;
  mpe::detail::reset_record(&rec);
  const mpe::detail::SumRowGradients sum{
      seg.data(), sorted_pos.data(), bag_of.data(), coef.data(), go.data(), 1, 1,
      D,          grad.data(),       &rec,          &one,        nullptr};
  sum(0, 0, 1);
  const mpe::detail::AccumulateRows<mpe::RowwiseAdagrad> acc{
      uniq.data(), D, {1.0f, 0.0f}, state, grad.data(), update.data(), &step, &rec, &one, nullptr};
  acc(0);
  CHECK(rec.pos[mpe::detail::kOverflow] == mpe::detail::kNoError);
  const mpe::detail::ApplyRows<S, mpe::NearestRounding> up{
      uniq.data(), nullptr,       no_cache, store, stride,         D,    1,      state,
      grad.data(), update.data(), 0,        &step, outcome.data(), &one, nullptr};
  up(0);
  CHECK(state_real[0] == 1.0f);  // G += mean(1^2) = 1, landed in the real slot
  rd(1);
  for (int d = 0; d < D; ++d) {
    // w - 1/sqrt(1) * 1, within one Int8 step of the new row's range
    CHECK(std::abs(out[static_cast<std::size_t>(D + d)] - (0.5f * d)) <= 7.5f / 255.0f * 1.01f);
  }
}
