// SPDX-License-Identifier: Apache-2.0
// EmbeddingConfig::slot_index: the row -> slot index, in the store rows (slot_index_in_rows,
// the default) or a separate array, stays exactly what the tags say (a plain loop over the
// tags is the reference) through fills, evictions, set_weights' drops, prefetch, load(),
// import_table() and flush(); and an object with it trains, evaluates, saves and exports the
// same bits as its twin without it, for every cache policy.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <vector>

#include "reference/embedding_bag.hpp"

namespace {

const std::vector<std::int64_t> kTables{40, 7, 150};
constexpr int kD = 5;
constexpr std::int64_t kB = 12;

template <class C>
using Emb = mpe::CachedEmbedding<mpe::Int8Rowwise, C, mpe::StochasticRounding>;

template <class C>
Emb<C> make(bool index, bool in_rows = true, std::int32_t alignment = 4) {
  const mpe::EmbeddingConfig cfg{.table_rows = kTables,
                                 .dim = kD,
                                 .cache_rows = 16,
                                 .seed = 7,
                                 .row_alignment = alignment,
                                 .slot_index = index,
                                 .slot_index_in_rows = in_rows};
  return Emb<C>(cfg, mpe::HostBackend{1});
}

std::vector<char> file_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  REQUIRE(f != nullptr);
  std::vector<char> v;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) v.insert(v.end(), buf, buf + n);
  std::fclose(f);
  return v;
}

/// The index an object must hold: each tagged slot's row maps to the slot, every other row
/// to -1, from a plain loop over the tags.
template <class E>
void check_index(const E& e) {
  const mpe::CacheRef c = e.cache_ref();
  REQUIRE(c.slot_of_row != nullptr);
  std::vector<std::int32_t> want(static_cast<std::size_t>(e.total_rows()), -1);
  for (std::int64_t s = 0; s < c.slots(); ++s)
    if (c.tags[s] >= 0) want[static_cast<std::size_t>(c.tags[s])] = static_cast<std::int32_t>(s);
  for (std::int64_t r = 0; r < e.total_rows(); ++r) {
    CAPTURE(r);
    REQUIRE(*c.slot_entry(r) == want[static_cast<std::size_t>(r)]);
    // find() answers from the index; the set scan must agree.
    std::int64_t scan = -1;
    const std::int64_t base = c.set_of(r) * c.ways;
    for (std::int32_t w = 0; w < c.ways; ++w)
      if (c.tags[base + w] == r) scan = base + w;
    REQUIRE(c.find(r) == scan);
  }
}

template <class E>
std::vector<float> weights(const E& e) {
  std::vector<float> w(static_cast<std::size_t>(e.total_rows()) * kD);
  e.get_weights(w);
  return w;
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("mpe_slot_index_") + name)).string();
}

}  // namespace

TEST_CASE_TEMPLATE("slot index: exact after every call; same bits as without it", C, mpe::Lru<4>, mpe::Lfu<4>,
                   mpe::DirectMapped, mpe::SecondTouchLru<4>, mpe::WTinyLfu<4>) {
  // Row alignment 4: the entry widens the row; 32: it lies in the row's padding (the same
  // stride as without it, the bytes not).
  for (const auto& [in_rows, align] : {std::pair{true, 4}, std::pair{true, 32}, std::pair{false, 4}}) {
    CAPTURE(in_rows);
    CAPTURE(align);
    Emb<C> plain = make<C>(false, true, align);
    Emb<C> indexed = make<C>(true, in_rows, align);
    CHECK(plain.cache_ref().slot_of_row == nullptr);
    // 13 B of data: 16 B rows at alignment 4, 32 B at 32.
    CHECK(plain.store_row_bytes() == (align == 4 ? 16u : 32u));
    // The index costs 4 B per row of the table in an array (cache_bytes); in the rows an
    // entry at byte 16 of each (the data rounded up to 4 B): a 20 B stride at alignment 4,
    // and the 32 B rows' padding at 32 (store_bytes).
    const auto rows = static_cast<std::size_t>(indexed.total_rows());
    if (in_rows) {
      CHECK(indexed.store_row_bytes() == (align == 4 ? 20u : 32u));
      CHECK(indexed.memory().cache_bytes == plain.memory().cache_bytes);
      CHECK(indexed.memory().store_bytes - plain.memory().store_bytes == (align == 4 ? 4 * rows : 0));
      CHECK(indexed.cache_ref().slot_stride == static_cast<std::int64_t>(indexed.store_row_bytes() / 4));
      CHECK(reinterpret_cast<const std::uint8_t*>(indexed.cache_ref().slot_of_row) - indexed.ref().store ==
            16);
    } else {
      CHECK(indexed.store_row_bytes() == plain.store_row_bytes());
      CHECK(indexed.memory().cache_bytes - plain.memory().cache_bytes == 4 * rows);
      CHECK(indexed.cache_ref().slot_stride == 1);
    }
    check_index(indexed);  // all -1 before any fill

    std::mt19937_64 rng(5);
    const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(plain.total_rows()) * kD, -1, 1);
    plain.set_weights(w0);
    indexed.set_weights(w0);
    const std::string path = temp_path("mid");
    for (int step = 0; step < 24; ++step) {
      CAPTURE(step);
      const ref::Batch b = ref::random_batch(rng, kTables, kB, 6, step % 3 == 0);
      const std::size_t out_size = static_cast<std::size_t>(kB) * kTables.size() * kD;
      std::vector<float> o1(out_size), o2(out_size);
      if (step % 4 == 1) {
        plain.prefetch(b.indices, b.offsets);
        indexed.prefetch(b.indices, b.offsets);
        check_index(indexed);
      }
      plain.forward(b.indices, b.offsets, o1, mpe::Pooling::Sum, b.weights);
      indexed.forward(b.indices, b.offsets, o2, mpe::Pooling::Sum, b.weights);
      check_index(indexed);
      REQUIRE(o1 == o2);
      const auto g = ref::random_floats(rng, out_size, -1, 1);
      plain.backward(g, mpe::RowwiseAdagrad{0.2f});
      indexed.backward(g, mpe::RowwiseAdagrad{0.2f});
      check_index(indexed);

      // Evaluation through the cache: slots from the index instead of the set scan.
      const ref::Batch e = ref::random_batch(rng, kTables, kB, 6, false);
      plain.forward_inference(e.indices, e.offsets, o1);
      indexed.forward_inference(e.indices, e.offsets, o2);
      REQUIRE(o1 == o2);

      if (step % 5 == 2) {  // set_weights drops the rows' cache lines (WriteRows / DropRows)
        const std::int64_t first = static_cast<std::int64_t>(rng() % 150),
                           count = 1 + static_cast<std::int64_t>(rng() % 30);
        const auto part = ref::random_floats(rng, static_cast<std::size_t>(count) * kD, -1, 1);
        plain.set_weights(part, first);
        indexed.set_weights(part, first);
        check_index(indexed);
      }
      if (step == 11) indexed.save(path);
      if (step % 6 == 3) {  // export and import: the rows' data, the entries kept
        const auto ex = mpe::io::export_table(indexed, 2, mpe::interop::FbgemmFused{});
        REQUIRE(ex == mpe::io::export_table(plain, 2, mpe::interop::FbgemmFused{}));
        check_index(indexed);
        std::vector<std::uint8_t> changed = ex;
        changed[0] = static_cast<std::uint8_t>(changed[0] ^ 0x11);  // row 0's first code
        mpe::io::import_table(plain, 2, mpe::interop::FbgemmFused{}, changed);
        mpe::io::import_table(indexed, 2, mpe::interop::FbgemmFused{}, changed);
        check_index(indexed);
        REQUIRE(mpe::io::export_table(indexed, 2, mpe::interop::FbgemmFused{}) == changed);
      }
    }
    REQUIRE(weights(plain) == weights(indexed));
    // A checkpoint holds the rows' data, not the index: the same bytes as the twin's.
    {
      const std::string a = temp_path("cmp_plain"), b = temp_path("cmp_indexed");
      plain.save(a);
      indexed.save(b);
      CHECK(file_bytes(a) == file_bytes(b));
      std::filesystem::remove(a);
      std::filesystem::remove(b);
    }

    // load(): the index is rebuilt from the loaded tags, whichever object wrote the file.
    Emb<C> restored = make<C>(true, in_rows, align);
    restored.load(path);
    check_index(restored);
    const std::string path_plain = temp_path("plain");
    plain.save(path_plain);
    Emb<C> from_plain = make<C>(true, in_rows, align);
    from_plain.load(path_plain);
    check_index(from_plain);
    indexed.load(path_plain);  // an object with a full index, replaced
    check_index(indexed);
    const ref::Batch e = ref::random_batch(rng, kTables, kB, 6, false);
    std::vector<float> o1(static_cast<std::size_t>(kB) * kTables.size() * kD), o2(o1.size()), o3(o1.size());
    plain.forward_inference(e.indices, e.offsets, o1);
    from_plain.forward_inference(e.indices, e.offsets, o2);
    indexed.forward_inference(e.indices, e.offsets, o3);
    CHECK(o1 == o2);
    CHECK(o1 == o3);
    indexed.flush();
    check_index(indexed);
    std::filesystem::remove(path);
    std::filesystem::remove(path_plain);
  }
}

namespace {

/// A batch of T * B bags mixing what the pooling paths tell apart: empty bags, runs of
/// one-row bags, bags of hot rows only (all cached once the cache is warm), long bags of
/// hot and cold rows; optional per-sample weights. `only` >= 0: every bag of that kind.
ref::Batch mixed_batch(std::mt19937_64& rng, const std::vector<std::int64_t>& rows, std::int64_t B,
                       bool weighted, int only = -1) {
  ref::Batch b;
  b.B = B;
  b.offsets.push_back(0);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f), wdist(-1.5f, 1.5f);
  for (const std::int64_t r : rows) {
    for (std::int64_t s = 0; s < B; ++s) {
      // 0: empty, 1-3: one row, 4-5: hot rows, 6-7: long mixed
      const auto kind = only >= 0 ? static_cast<std::uint64_t>(only) : rng() % 8;
      const int L = kind == 0 ? 0 : kind < 4 ? 1 : kind < 6 ? 6 : 40;
      for (int k = 0; k < L; ++k) {
        const float x = u01(rng);
        auto idx = kind == 4 || kind == 5 ? static_cast<std::int64_t>(rng() % 8)
                                          : static_cast<std::int64_t>(x * x * x * static_cast<float>(r));
        if (idx >= r) idx = r - 1;
        b.indices.push_back(idx);
        if (weighted) b.weights.push_back(wdist(rng));
      }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  return b;
}

}  // namespace

// forward_inference with the index reads each occurrence's slot inside the pooling pass
// (PoolBags::probe_out), ahead of the rows it pools and only within each thread's range of
// bags; without the index a pass before it scans the sets. Both must give the same slots,
// so the same bits, on every pooling path: the AVX-512 and AVX2 kernels (in-pass reads), the
// portable loop (SIMD off: the index read in the pass before), one-row runs, all-cached and
// mixed bags, weights and mean, one and two threads (two: ranges of 16 bags, so many range
// ends fall inside the prefetch distance), the index in the store rows (one thread) and an
// array (two).
TEST_CASE_TEMPLATE("slot index: forward_inference's in-pass slot reads give the set scan's bits", S,
                   mpe::Int8Rowwise, mpe::Fp16, mpe::Int4Rowwise) {
  const std::vector<std::int64_t> tables{3000, 700};
  constexpr std::int64_t B = 64;
  for (const int D : {64, 20}) {
    CAPTURE(D);
    using E = mpe::CachedEmbedding<S, mpe::Lru<8>, mpe::StochasticRounding>;
    const auto cfg = [&](bool index, bool in_rows) {
      return mpe::EmbeddingConfig{.table_rows = tables,
                                  .dim = D,
                                  .cache_rows = 256,
                                  .seed = 3,
                                  .slot_index = index,
                                  .slot_index_in_rows = in_rows};
    };
    E plain(cfg(false, true), mpe::HostBackend{1});
    E one(cfg(true, true), mpe::HostBackend{1});   // the index in the store rows
    E two(cfg(true, false), mpe::HostBackend{2});  // the index an array
    std::mt19937_64 rng(11);
    const auto w0 = ref::random_floats(rng, static_cast<std::size_t>(plain.total_rows()) * D, -1, 1);
    for (E* e : {&plain, &one, &two}) e->set_weights(w0);
    const std::size_t out_size = static_cast<std::size_t>(B) * tables.size() * static_cast<std::size_t>(D);
    // Warm the cache by training (the three objects stay identical).
    for (int step = 0; step < 6; ++step) {
      const ref::Batch b = mixed_batch(rng, tables, B, false);
      const auto g = ref::random_floats(rng, out_size, -1, 1);
      for (E* e : {&plain, &one, &two}) {
        std::vector<float> o(out_size);
        e->forward(b.indices, b.offsets, o);
        e->backward(g, mpe::RowwiseAdagrad{0.1f});
      }
    }
    std::int64_t cached = 0;
    for (std::int64_t s = 0; s < plain.cache_ref().slots(); ++s) cached += plain.cache_ref().tags[s] >= 0;
    REQUIRE(cached > 128);  // the cache holds rows: pooled bags mix cached and store rows
    // Restores the pooling switches however the block ends.
    struct Switches {
      bool simd = mpe::detail::set_host_simd(true), wide = mpe::detail::set_host_avx512(true);
      ~Switches() {
        mpe::detail::set_host_avx512(wide);
        mpe::detail::set_host_simd(simd);
      }
    } restore;
    // Path 0 is AVX2 again on a CPU without AVX-512 (set_host_avx512 cannot turn it on).
    for (const int path : {0, 1, 2}) {  // AVX-512 where the CPU has it, AVX2, portable
      CAPTURE(path);
      mpe::detail::set_host_avx512(path == 0);
      mpe::detail::set_host_simd(path < 2);
      for (const bool weighted : {false, true}) {
        for (const auto pooling : {mpe::Pooling::Sum, mpe::Pooling::Mean}) {
          if (weighted && pooling == mpe::Pooling::Mean) continue;
          const ref::Batch b = mixed_batch(rng, tables, B, weighted);
          std::vector<float> want(out_size), got1(out_size, -7.0f), got2(out_size, -7.0f);
          plain.forward_inference(b.indices, b.offsets, want, pooling, b.weights);
          one.forward_inference(b.indices, b.offsets, got1, pooling, b.weights);
          two.forward_inference(b.indices, b.offsets, got2, pooling, b.weights);
          CHECK(got1 == want);
          CHECK(got2 == want);
          // And they are the plain FP32 bag of the weights the object reads back, bit for
          // bit: the same operations in the same order (index order; mean: times 1/L), the
          // tests built without FMA contraction.
          ref::EmbeddingBag bag(tables, D);
          plain.get_weights(bag.weights());
          CHECK(ref::same_bits(want, bag.forward(b, pooling)));
        }
      }
      // Every bag empty (no occurrence: nothing to read), and 150 one-row bags a table (runs
      // longer than the 64 bags whose slots the pooling reads at a time).
      for (const auto& [kind, bags] : {std::pair{0, B}, std::pair{1, std::int64_t{150}}}) {
        CAPTURE(kind);
        const ref::Batch b = mixed_batch(rng, tables, bags, false, kind);
        const std::size_t size = static_cast<std::size_t>(bags) * tables.size() * static_cast<std::size_t>(D);
        std::vector<float> want(size), got1(size, -7.0f), got2(size, -7.0f);
        plain.forward_inference(b.indices, b.offsets, want);
        one.forward_inference(b.indices, b.offsets, got1);
        two.forward_inference(b.indices, b.offsets, got2);
        CHECK(got1 == want);
        CHECK(got2 == want);
        if (kind == 0) CHECK(want == std::vector<float>(size, 0.0f));
      }
    }
  }
}
