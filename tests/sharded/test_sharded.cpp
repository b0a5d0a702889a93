// SPDX-License-Identifier: Apache-2.0
// ShardedEmbedding under mpirun (any rank count >= 1; CTest runs -np 2 and -np 3) against
// one CachedEmbedding over all tables fed the global batch (the ranks' local batches
// concatenated in rank order). Every rank builds the reference itself.
//
// Batches: T = 4 tables (37, 211, 13, 120 rows), D = 8, B_local = 2 + (rank + step) % 3
// (ranks differ), bags of 0..5 rows with repeats (skewed ids). Output gradients are a
// fixed hash of (step, global sample, column), independent of the outputs, so both sides
// get the same gradients and the updates can be compared bit for bit.
#include <doctest/doctest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mpe/mpe.hpp>
#include <mpe/sharded/mpi_comm.hpp>
#include <mpe/sharded/sharded_embedding.hpp>
#include <string>
#include <vector>

namespace {

using namespace mpe;
using namespace mpe::sharded;

const std::vector<std::int64_t> kRows{37, 211, 13, 120};
constexpr int kD = 8;
constexpr int kSteps = 20;

MpiComm& world() {
  static MpiComm c(MPI_COMM_WORLD);
  return c;
}

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
float unit(std::uint64_t h) { return static_cast<float>(h >> 40) * 0x1p-24f; }  // [0, 1)

struct Batch {
  std::int64_t B = 0;
  std::vector<std::int64_t> idx, off{0};
  std::vector<float> w;
};

// Rank s's local batch of step k (every rank can build every rank's batch).
Batch local_batch(int s, int k, bool weights) {
  Batch b;
  b.B = 2 + (s + k) % 3;
  std::uint64_t h =
      mix(static_cast<std::uint64_t>(s) * 1000003u + static_cast<std::uint64_t>(k) * 7919u + 17);
  for (std::size_t t = 0; t < kRows.size(); ++t)
    for (std::int64_t i = 0; i < b.B; ++i) {
      h = mix(h);
      const int L = static_cast<int>(h % 6);
      for (int l = 0; l < L; ++l) {
        h = mix(h);
        const float u = unit(h);
        b.idx.push_back(static_cast<std::int64_t>(u * u * static_cast<float>(kRows[t])) % kRows[t]);
        if (weights) b.w.push_back(0.25f + unit(mix(h)));
      }
      b.off.push_back(static_cast<std::int64_t>(b.idx.size()));
    }
  return b;
}

// The global batch: table-major, bags of rank 0's samples, then rank 1's, ...
Batch global_batch(int N, int k, bool weights, std::vector<std::int64_t>* first_sample = nullptr) {
  std::vector<Batch> loc;
  Batch g;
  for (int s = 0; s < N; ++s) loc.push_back(local_batch(s, k, weights));
  if (first_sample) first_sample->clear();
  for (auto& l : loc) {
    if (first_sample) first_sample->push_back(g.B);
    g.B += l.B;
  }
  for (std::size_t t = 0; t < kRows.size(); ++t)
    for (auto& l : loc)
      for (std::int64_t i = 0; i < l.B; ++i) {
        const auto j = static_cast<std::size_t>(static_cast<std::int64_t>(t) * l.B + i);
        for (auto p = l.off[j]; p < l.off[j + 1]; ++p) {
          g.idx.push_back(l.idx[static_cast<std::size_t>(p)]);
          if (!l.w.empty()) g.w.push_back(l.w[static_cast<std::size_t>(p)]);
        }
        g.off.push_back(static_cast<std::int64_t>(g.idx.size()));
      }
  return g;
}

std::vector<float> global_grad(std::int64_t Bg, int k) {
  const std::size_t TD = kRows.size() * kD;
  std::vector<float> g(static_cast<std::size_t>(Bg) * TD);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = unit(mix(i * 131 + static_cast<std::uint64_t>(k))) - 0.5f;
  return g;
}

std::vector<float> initial_weights() {
  std::int64_t n = 0;
  for (auto r : kRows) n += r;
  std::vector<float> w(static_cast<std::size_t>(n) * kD);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.2f * (unit(mix(i + 99)) - 0.5f);
  return w;
}

EmbeddingConfig config(std::int64_t cache_rows) {
  EmbeddingConfig c;
  c.table_rows = kRows;
  c.dim = kD;
  c.cache_rows = cache_rows;
  c.seed = 7;
  return c;
}

bool same_bits(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

ShardingPlan mixed_plan(int N) {
  ShardingPlan p = table_wise_plan(kRows, kD, N);
  p.tables[1] = {ShardKind::Row, 0, even_bounds(kRows[1], N)};
  p.tables[3] = {ShardKind::Column, 0, even_bounds(kD, N)};
  p.tables[0].owner = N - 1;
  p.validate();
  return p;
}

enum class Out { Exact, RowTolerance };

// 20 steps of sharded vs single-process training; outputs (and, for row-wise tables,
// the reassociation bound), weights after every step, bit for bit where promised. The start:
// the same weights through set_weights(), or (init) both objects' init_uniform(), whose
// draws and rounding must already give the same bits.
template <class Storage, class Cache, class Rounding, class Opt>
void check_equivalence(const ShardingPlan& plan, const Opt& opt, std::int64_t cache_rows, Pooling pooling,
                       bool weights, ShardOptions options = {}, bool init = false) {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank();
  const EmbeddingConfig cfg = config(cache_rows);
  CachedEmbedding<Storage, Cache, Rounding> ref(cfg);
  ShardedEmbedding<Storage, Cache, Rounding, MpiComm> sh(cfg, plan, comm, options);
  const std::vector<float> w0 = initial_weights();
  const std::size_t TD = kRows.size() * kD;
  std::vector<float> wref(w0.size()), wsh(w0.size());
  if (init) {
    ref.init_uniform(-0.5f, 0.5f);
    sh.init_uniform(-0.5f, 0.5f);
    ref.get_weights(wref);
    sh.get_weights(wsh);
    REQUIRE_MESSAGE(same_bits(wref.data(), wsh.data(), wref.size()), "weights differ after init_uniform");
  } else {
    ref.set_weights(w0);
    sh.set_weights(w0);
  }
  std::int64_t inexact = 0, exact_single_owner = 0;
  for (int k = 0; k < kSteps; ++k) {
    std::vector<std::int64_t> first;
    const Batch g = global_batch(N, k, weights, &first);
    const Batch l = local_batch(me, k, weights);
    ref.get_weights(wref);  // for the row-wise error bound
    std::vector<float> oref(static_cast<std::size_t>(g.B) * TD), osh(static_cast<std::size_t>(l.B) * TD);
    ref.forward(g.idx, g.off, oref, pooling, g.w);
    sh.forward(l.idx, l.off, osh, pooling, l.w);
    const std::int64_t b0 = first[static_cast<std::size_t>(me)];
    for (std::size_t t = 0; t < kRows.size(); ++t)
      for (std::int64_t b = 0; b < l.B; ++b) {
        const float* o = osh.data() + static_cast<std::size_t>(b) * TD + t * kD;
        const float* r = oref.data() + static_cast<std::size_t>(b0 + b) * TD + t * kD;
        if (plan.tables[t].kind != ShardKind::Row) {
          REQUIRE_MESSAGE(same_bits(o, r, kD), "step " << k << " table " << t << " sample " << b);
          continue;
        }
        // Row-wise: bit-exact when one rank holds all the bag's rows; else within the
        // reassociation bound 2 (L - 1) 2^-24 sum|w x| (both orders' error).
        const auto j = static_cast<std::size_t>(static_cast<std::int64_t>(t) * l.B + b);
        const auto& bounds = plan.tables[t].bounds;
        std::int64_t lo = N, hi = -1;
        const std::int64_t L = l.off[j + 1] - l.off[j];
        for (auto p = l.off[j]; p < l.off[j + 1]; ++p) {
          const auto x = l.idx[static_cast<std::size_t>(p)];
          const std::int64_t owner = std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin() - 1;
          lo = std::min(lo, owner), hi = std::max(hi, owner);
        }
        if (lo == hi || L <= 1) {
          REQUIRE_MESSAGE(same_bits(o, r, kD), "row-wise single-owner bag, step " << k << " table " << t);
          ++exact_single_owner;
          continue;
        }
        for (int d = 0; d < kD; ++d) {
          double S = 0;
          std::int64_t base = 0;
          for (std::size_t u = 0; u < t; ++u) base += kRows[u];
          for (auto p = l.off[j]; p < l.off[j + 1]; ++p) {
            const double wt = l.w.empty() ? 1.0 : std::fabs(l.w[static_cast<std::size_t>(p)]);
            S +=
                wt * std::fabs(wref[static_cast<std::size_t>(base + l.idx[static_cast<std::size_t>(p)]) * kD +
                                    static_cast<std::size_t>(d)]);
          }
          const double tol = 2.0 * static_cast<double>(L - 1) * 0x1p-24 * S;
          REQUIRE(std::fabs(static_cast<double>(o[d]) - r[d]) <= tol);
          if (o[d] != r[d]) ++inexact;
        }
      }
    const std::vector<float> gg = global_grad(g.B, k);
    ref.backward(gg, opt);
    sh.backward(std::span<const float>(gg.data() + static_cast<std::size_t>(b0) * TD,
                                       static_cast<std::size_t>(l.B) * TD),
                opt);
    ref.get_weights(wref);
    sh.get_weights(wsh);
    REQUIRE_MESSAGE(same_bits(wref.data(), wsh.data(), wref.size()), "weights differ after step " << k);
  }
  CHECK(sh.step() == static_cast<std::uint64_t>(kSteps));
  bool column = false;  // a column-wise row is looked up once per column shard
  for (const auto& t : plan.tables) column = column || (t.kind == ShardKind::Column && N > 1);
  if (cache_rows == 0 && !column) {  // without a cache every counter adds up to the single process's
    const CacheStats a = sh.stats_reduced(), b = ref.stats();
    CHECK(a.lookups == b.lookups);
    CHECK(a.unique_rows == b.unique_rows);
    CHECK(a.saturated_rows == b.saturated_rows);
    CHECK(a.writebacks == b.writebacks);
  }
  MESSAGE("rank " << me << ": row-wise outputs differing by reassociation: " << inexact
                  << " elements; single-owner row-wise bags exact: " << exact_single_owner);
}

}  // namespace

TEST_CASE("plans: text round trip, greedy balance, validation") {
  const int N = world().size();
  for (const ShardingPlan& p : {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N),
                                column_wise_plan(kRows, kD, N), auto_plan(kRows, kD, N), mixed_plan(N)}) {
    CHECK(ShardingPlan::parse(p.to_string()) == p);
    std::int64_t covered = 0;  // every (row, column) held exactly once
    for (int r = 0; r < N; ++r)
      for (const Piece& q : p.pieces_of(r)) covered += q.rows() * q.cols();
    std::int64_t total = 0;
    for (auto r : kRows) total += r * kD;
    CHECK(covered == total);
  }
  // Greedy by bytes: 211 alone, then 120, then 37 + 13 on the least loaded rank.
  const ShardingPlan tw = table_wise_plan({37, 211, 13, 120}, kD, 2);
  CHECK(tw.tables[1].owner == 0);
  CHECK(tw.tables[3].owner == 1);
  CHECK(tw.tables[0].owner == 1);
  CHECK(tw.tables[2].owner == 1);
  // By measured lookup counts instead.
  const std::vector<double> lookups{900, 10, 50, 40};
  CHECK(table_wise_plan({37, 211, 13, 120}, kD, 2, lookups).tables[0].owner == 0);
  CHECK(table_wise_plan({37, 211, 13, 120}, kD, 2, lookups).tables[1].owner == 1);
  // Saved and loaded as text (each rank its own file here).
  const std::filesystem::path f =
      std::filesystem::temp_directory_path() /
      ("mpe_plan_" + std::to_string(getpid()) + "_" + std::to_string(world().rank()) + ".txt");
  mixed_plan(N).save(f);
  CHECK(ShardingPlan::load(f) == mixed_plan(N));
  std::filesystem::remove(f);
  // Lookup counts measured on a batch (T = 4 tables, B = 2 bags each).
  const std::vector<std::int64_t> off{0, 2, 4, 4, 5, 6, 6, 9, 9};  // T = 4, B = 2
  const std::vector<double> measured = cost_by_lookups(off, 4);
  CHECK(measured == std::vector<double>{4, 1, 1, 3});
  CHECK(table_wise_plan(kRows, kD, 2, measured).tables[3].owner == 1);  // 4 on rank 0, then 3 on rank 1
  CHECK_THROWS_AS(cost_by_lookups(std::vector<std::int64_t>{0, 1, 2}, 4), std::invalid_argument);
  ShardingPlan bad = row_wise_plan(kRows, kD, 2);
  bad.tables[0].bounds[1] = 99;
  CHECK_THROWS_AS(bad.validate(), std::invalid_argument);
  CHECK_THROWS_AS(
      ShardingPlan::parse("mpe-sharding-plan v1\nworld_size 2\ndim 8\ntables 1\ntable 0 rows 5 table 7\n"),
      std::invalid_argument);
}

TEST_CASE("plans and wire precisions by name (train_dlrm's --shard, --comm-precision)") {
  const int N = world().size();
  CHECK(plan_by_name("table", kRows, kD, N) == table_wise_plan(kRows, kD, N));
  // One row size for every table: by bytes is by rows (what "table" relies on).
  CHECK(table_wise_plan(kRows, kD, N) == table_wise_plan(kRows, kD, N, cost_by_bytes(kRows, 72)));
  CHECK(plan_by_name("row", kRows, kD, N) == row_wise_plan(kRows, kD, N));
  CHECK(plan_by_name("column", kRows, kD, N) == column_wise_plan(kRows, kD, N));
  CHECK(plan_by_name("auto", kRows, kD, N) == auto_plan(kRows, kD, N));
  // An unknown name is refused with the name in the message.
  for (const char* name : {"", "rows", "Table", "mixed"}) {
    try {
      (void)plan_by_name(name, kRows, kD, N);
      FAIL("no exception for plan name \"" << name << "\"");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("\"" + std::string(name) + "\"") != std::string::npos);
    }
  }
  for (CommPrecision p : {CommPrecision::Fp32, CommPrecision::Fp16, CommPrecision::Bf16})
    CHECK(comm_precision_from_string(to_string(p)) == p);
  CHECK(std::string(to_string(CommPrecision::Bf16)) == "bf16");
  try {
    (void)comm_precision_from_string("fp8");
    FAIL("no exception for precision fp8");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("\"fp8\"") != std::string::npos);
  }
}

TEST_CASE("table-wise: bit-identical to one process (Fp32 store + LRU cache; SGD, RowwiseAdagrad)") {
  const int N = world().size();
  const ShardingPlan p = table_wise_plan(kRows, kD, N, cost_by_bytes(kRows, 4 * kD));
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(p, Sgd{0.5f}, 40, Pooling::Sum, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(p, RowwiseAdagrad{0.3f}, 40, Pooling::Sum, false);
  check_equivalence<Fp32, Lfu<4>, StochasticRounding>(p, Sgd{0.5f}, 24, Pooling::Mean, false);
  check_equivalence<Fp32, DirectMapped, StochasticRounding>(p, RowwiseAdagrad{0.3f}, 16, Pooling::Sum, true);
}

TEST_CASE(
    "quantized stores, NearestRounding, no cache: table/row (Int8, Int4), column (Fp16) bit-identical") {
  const int N = world().size();
  check_equivalence<Int8Rowwise, Lru<4>, NearestRounding>(table_wise_plan(kRows, kD, N), Sgd{0.5f}, 0,
                                                          Pooling::Sum, false);
  check_equivalence<Int4Rowwise, Lru<4>, NearestRounding>(row_wise_plan(kRows, kD, N), RowwiseAdagrad{0.3f},
                                                          0, Pooling::Sum, false);
  // Column-wise needs a per-element store (an Int8 column shard has its own scale/bias).
  check_equivalence<Fp16, Lru<4>, NearestRounding>(column_wise_plan(kRows, kD, N), Sgd{0.5f}, 0, Pooling::Sum,
                                                   false);
}

TEST_CASE("stochastic rounding, no cache: init_uniform and training round every row as one process") {
  // One rounding stream per row, keyed by its table and row (and a column piece by its
  // first column): the pieces initialize (site Init) and round every write with the single
  // process's words, so quantized stores give its bits.
  const int N = world().size();
  check_equivalence<Int8Rowwise, Lru<4>, StochasticRounding>(table_wise_plan(kRows, kD, N), Sgd{0.5f}, 0,
                                                             Pooling::Sum, false, {}, true);
  check_equivalence<Int8Rowwise, Lru<4>, StochasticRounding>(
      row_wise_plan(kRows, kD, N), RowwiseAdagrad{0.3f}, 0, Pooling::Sum, false, {}, true);
  check_equivalence<Int4Rowwise, Lru<4>, StochasticRounding>(auto_plan(kRows, kD, N), Sgd{0.5f}, 0,
                                                             Pooling::Sum, true, {}, true);
  // Column pieces of a per-element store, each starting at a multiple of 4 columns (whole
  // element groups: column_keys); with 3 ranks D = 8 splits at 3 and 6, which no key places.
  const std::vector<std::int64_t> cb = even_bounds(kD, N);
  if (std::all_of(cb.begin(), cb.end(), [](std::int64_t c) { return c % 4 == 0; })) {
    check_equivalence<Fp16, Lru<4>, StochasticRounding>(column_wise_plan(kRows, kD, N), Sgd{0.5f}, 0,
                                                        Pooling::Sum, false, {}, true);
  }
}

TEST_CASE("row-wise: updates bit-identical, outputs within the documented reassociation bound") {
  const int N = world().size();
  const ShardingPlan p = row_wise_plan(kRows, kD, N);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(p, Sgd{0.5f}, 40, Pooling::Sum, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(p, RowwiseAdagrad{0.3f}, 40, Pooling::Mean, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(p, Sgd{0.5f}, 0, Pooling::Sum, true);
}

TEST_CASE("column-wise SGD and mixed plans: bit-identical") {
  const int N = world().size();
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(column_wise_plan(kRows, kD, N), Sgd{0.5f}, 40,
                                                      Pooling::Sum, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(column_wise_plan(kRows, kD, N), Sgd{0.5f}, 40,
                                                      Pooling::Mean, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(column_wise_plan(kRows, kD, N), Sgd{0.5f}, 40,
                                                      Pooling::Sum, true);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(mixed_plan(N), Sgd{0.5f}, 40, Pooling::Sum, false);
  check_equivalence<Fp32, Lru<4>, StochasticRounding>(auto_plan(kRows, kD, N), RowwiseAdagrad{0.3f}, 40,
                                                      Pooling::Sum, false);
}

TEST_CASE("column-wise RowwiseAdagrad: per-shard mean (each column shard its own accumulator)") {
  // Reference for the rule: one CachedEmbedding per column block [c0, c1) over all
  // tables with dim c1 - c0, fed the global batch and the gradient's columns.
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank();
  const ShardingPlan p = column_wise_plan(kRows, kD, N);
  const EmbeddingConfig cfg = config(40);
  ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> sh(cfg, p, comm);
  const auto& cb = p.tables[0].bounds;
  std::vector<CachedEmbedding<Fp32, Lru<4>, StochasticRounding>> refs;
  const std::vector<float> w0 = initial_weights();
  const std::size_t R = w0.size() / kD, TD = kRows.size() * kD;
  auto cols = [&](const std::vector<float>& full, std::size_t rows, std::size_t width, int r) {
    const auto c0 = static_cast<std::size_t>(cb[static_cast<std::size_t>(r)]);
    const auto c1 = static_cast<std::size_t>(cb[static_cast<std::size_t>(r) + 1]);
    std::vector<float> out;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t t = 0; t < width / kD; ++t)
        out.insert(out.end(), full.begin() + static_cast<std::ptrdiff_t>(i * width + t * kD + c0),
                   full.begin() + static_cast<std::ptrdiff_t>(i * width + t * kD + c1));
    return out;
  };
  for (int r = 0; r < N; ++r) {
    EmbeddingConfig c = cfg;
    c.dim = static_cast<std::int32_t>(cb[static_cast<std::size_t>(r) + 1] - cb[static_cast<std::size_t>(r)]);
    if (c.dim == 0) continue;
    refs.emplace_back(c);
    refs.back().set_weights(cols(w0, R, kD, r));
  }
  sh.set_weights(w0);
  std::vector<float> wsh(w0.size());
  for (int k = 0; k < kSteps; ++k) {
    std::vector<std::int64_t> first;
    const Batch g = global_batch(N, k, false, &first);
    const Batch l = local_batch(me, k, false);
    std::vector<float> osh(static_cast<std::size_t>(l.B) * TD);
    sh.forward(l.idx, l.off, osh);
    const std::vector<float> gg = global_grad(g.B, k);
    for (std::size_t r = 0; r < refs.size(); ++r) {
      const std::size_t dl = static_cast<std::size_t>(refs[r].dim());
      std::vector<float> o(static_cast<std::size_t>(g.B) * kRows.size() * dl);
      refs[r].forward(g.idx, g.off, o);
      refs[r].backward(cols(gg, static_cast<std::size_t>(g.B), TD, static_cast<int>(r)),
                       RowwiseAdagrad{0.3f});
    }
    sh.backward(
        std::span<const float>(gg.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                               static_cast<std::size_t>(l.B) * TD),
        RowwiseAdagrad{0.3f});
    sh.get_weights(wsh);
    for (std::size_t r = 0; r < refs.size(); ++r) {
      std::vector<float> wr(R * static_cast<std::size_t>(refs[r].dim()));
      refs[r].get_weights(wr);
      const std::vector<float> mine = cols(wsh, R, kD, static_cast<int>(r));
      REQUIRE_MESSAGE(same_bits(wr.data(), mine.data(), wr.size()), "column block " << r << " step " << k);
    }
  }
}

TEST_CASE("init_uniform equals the single process's draw (Fp32), stats reduce, memory per rank") {
  MpiComm& comm = world();
  const int N = comm.size();
  const EmbeddingConfig cfg = config(0);
  CachedEmbedding<Fp32, Lru<4>, StochasticRounding> ref(cfg);
  ref.init_uniform(-0.05f, 0.05f);
  for (const ShardingPlan& p :
       {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N), column_wise_plan(kRows, kD, N)}) {
    ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> sh(cfg, p, comm);
    sh.init_uniform(-0.05f, 0.05f);
    std::vector<float> a(static_cast<std::size_t>(ref.total_rows()) * kD), b(a.size());
    ref.get_weights(a);
    sh.get_weights(b);
    CHECK(same_bits(a.data(), b.data(), a.size()));
    // A partial range through get_weights.
    std::vector<float> part(5 * kD);
    sh.get_weights(part, 35);
    CHECK(same_bits(part.data(), a.data() + 35 * kD, part.size()));
    const auto mem = sh.memory_per_rank();
    REQUIRE(mem.size() == static_cast<std::size_t>(N));
    std::size_t store = 0;
    for (const auto& m : mem) store += m.store_bytes;
    CHECK(store == ref.memory().store_bytes);  // Fp32, no padding: the rows add up
  }
  // Table-wise lookups add up to the single process's.
  ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> sh(config(40), table_wise_plan(kRows, kD, N),
                                                                 comm);
  CachedEmbedding<Fp32, Lru<4>, StochasticRounding> one(config(40));
  const Batch g = global_batch(N, 0, false);
  const Batch l = local_batch(comm.rank(), 0, false);
  std::vector<float> o1(static_cast<std::size_t>(g.B) * kRows.size() * kD),
      o2(static_cast<std::size_t>(l.B) * kRows.size() * kD);
  one.forward(g.idx, g.off, o1);
  sh.forward(l.idx, l.off, o2);
  CHECK(sh.stats_reduced().lookups == one.stats().lookups);
  CHECK(sh.comm_stats().calls > 0);
}

TEST_CASE("a bad input on one rank: every rank throws the same error, no state changes anywhere") {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank(), bad = N - 1;
  for (const ShardingPlan& p : {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N), mixed_plan(N)}) {
    ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> sh(config(40), p, comm);
    CachedEmbedding<Fp32, Lru<4>, StochasticRounding> ref(config(40));
    const std::vector<float> w0 = initial_weights();
    sh.set_weights(w0);
    ref.set_weights(w0);
    Batch l = local_batch(me, 0, false);
    std::vector<float> out(static_cast<std::size_t>(l.B) * kRows.size() * kD, 42.0f);
    auto expect_all = [&](auto&& call, const std::string& needle) {
      std::string what;
      try {
        call();
      } catch (const std::invalid_argument& e) {
        what = e.what();
      }
      CHECK_MESSAGE(what.find(needle) != std::string::npos, what);
      CHECK(what.find("rank " + std::to_string(bad)) != std::string::npos);
      // Every rank got the same message.
      std::vector<char> mine(512, '\0'), root(512, '\0');
      std::copy_n(what.data(), std::min<std::size_t>(what.size(), 511), mine.data());
      root = mine;
      comm.broadcast(std::span<char>(root), 0);
      CHECK(mine == root);
    };
    // Bad index on the last rank only.
    Batch b1 = l;
    if (me == bad) b1.idx.empty() ? (void)0 : (void)(b1.idx.back() = 100000);
    if (me == bad && b1.idx.empty()) {  // make sure the bad rank has an index to break
      b1.idx.push_back(100000);
      b1.off.back() += 1;
    }
    expect_all([&] { sh.forward(b1.idx, b1.off, out); }, "indices[");
    // Bad offsets on the last rank only (decreasing).
    Batch b2 = l;
    if (me == bad) b2.off[1] = -1;
    expect_all([&] { sh.forward(b2.idx, b2.off, out); }, "offsets[");
    // Output of the wrong size.
    std::vector<float> small(me == bad ? 3 : out.size());
    expect_all([&] { sh.forward(l.idx, l.off, small); }, "output.size()");
    CHECK(out[0] == 42.0f);  // untouched
    // Ranks in different calls (forward on rank 0, forward_inference elsewhere): every rank
    // throws logic_error, nothing runs.
    if (N > 1) {
      int mismatch = 0;
      try {
        if (me == 0)
          sh.forward(l.idx, l.off, out);
        else
          sh.forward_inference(l.idx, l.off, out);
      } catch (const std::logic_error& e) {
        mismatch = std::string(e.what()).find("different collective") != std::string::npos;
      }
      CHECK(mismatch == 1);
      CHECK(out[0] == 42.0f);
    }
    // Nothing awaits backward: every rank throws logic_error.
    std::vector<float> gl(out.size(), 0.1f);
    int logic = 0;
    try {
      sh.backward(gl, Sgd{0.1f});
    } catch (const std::logic_error&) {
      logic = 1;
    }
    CHECK(logic == 1);
    // A valid step, then a non-finite gradient on the last rank: no update anywhere.
    std::vector<std::int64_t> first;
    const Batch g = global_batch(N, 0, false, &first);
    std::vector<float> og(static_cast<std::size_t>(g.B) * kRows.size() * kD);
    ref.forward(g.idx, g.off, og);
    sh.forward(l.idx, l.off, out);
    std::vector<float> gbad = gl;
    if (me == bad) gbad[1] = std::nanf("");
    expect_all([&] { sh.backward(gbad, Sgd{0.1f}); }, "grad_output[1]");
    std::vector<float> wa(w0.size());
    sh.get_weights(wa);
    CHECK(same_bits(wa.data(), w0.data(), w0.size()));
    CHECK(sh.step() == 0);
    // The forward is still pending: the valid backward goes through, equal to the reference.
    const std::vector<float> gg = global_grad(g.B, 0);
    const std::size_t TD = kRows.size() * kD;
    ref.backward(gg, Sgd{0.1f});
    sh.backward(
        std::span<const float>(gg.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                               static_cast<std::size_t>(l.B) * TD),
        Sgd{0.1f});
    std::vector<float> wr(w0.size());
    ref.get_weights(wr);
    sh.get_weights(wa);
    CHECK(same_bits(wa.data(), wr.data(), wr.size()));
    // set_weights with a non-finite value: all throw, nothing written.
    std::vector<float> wbad = w0;
    wbad[static_cast<std::size_t>(kRows[0]) * kD + 3] = INFINITY;  // table 1's first row
    std::string what;
    try {
      sh.set_weights(wbad);
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    CHECK(what.find("is not finite") != std::string::npos);
    sh.get_weights(wa);
    CHECK(same_bits(wa.data(), wr.data(), wr.size()));
  }
}

TEST_CASE("checkpoints: per-rank shards + manifest; exact resume; plan or rank-count mismatch refused") {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank();
  std::vector<char> name(256, '\0');
  if (me == 0) {
    const std::string s =
        (std::filesystem::temp_directory_path() / ("mpe_dist_ckpt_" + std::to_string(getpid()))).string();
    std::copy(s.begin(), s.end(), name.begin());
  }
  comm.broadcast(std::span<char>(name), 0);
  const std::filesystem::path dir(name.data());
  const ShardingPlan p = mixed_plan(N);
  ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm> a(config(40), p, comm);
  a.init_uniform(-0.1f, 0.1f);
  const std::size_t TD = kRows.size() * kD;
  auto steps = [&](auto& e, int k0, int k1) {
    for (int k = k0; k < k1; ++k) {
      std::vector<std::int64_t> first;
      const Batch g = global_batch(N, k, false, &first);
      const Batch l = local_batch(me, k, false);
      std::vector<float> o(static_cast<std::size_t>(l.B) * TD);
      e.forward(l.idx, l.off, o);
      const std::vector<float> gg = global_grad(g.B, k);
      e.backward(std::span<const float>(
                     gg.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                     static_cast<std::size_t>(l.B) * TD),
                 RowwiseAdagrad{0.2f});
    }
  };
  steps(a, 0, 5);
  a.save(dir);
  // Each local table's whole state at the save, its call counter included (#40 item 7).
  std::vector<std::vector<std::uint8_t>> at_save;
  for (std::size_t gi = 0; gi < a.num_local_tables(); ++gi) at_save.push_back(io::save_to_bytes(a.local(gi)));
  steps(a, 5, 10);
  std::vector<float> wa(static_cast<std::size_t>(a.total_rows()) * kD), wb(wa.size());
  a.get_weights(wa);
  ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm> b(config(40), p, comm);
  b.load(dir);
  CHECK(b.step() == 5);
  REQUIRE(b.num_local_tables() == at_save.size());
  for (std::size_t gi = 0; gi < at_save.size(); ++gi) {
    const std::vector<std::uint8_t> loaded = io::save_to_bytes(b.local(gi));
    CHECK(loaded == at_save[gi]);
    std::uint32_t H;
    std::memcpy(&H, loaded.data() + 12, 4);
    std::uint64_t calls;  // the header's `u64 calls`, before u32 n_sections and the header CRC
    std::memcpy(&calls, loaded.data() + H - 16, 8);
    CHECK(calls == 10u);  // 5 forward() and 5 backward() calls of this local table
  }
  steps(b, 5, 10);
  b.get_weights(wb);
  CHECK(same_bits(wa.data(), wb.data(), wa.size()));
  // Another plan: refused on every rank, state unchanged.
  if (N > 1) {
    ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm> c(config(40),
                                                                         row_wise_plan(kRows, kD, N), comm);
    CHECK_THROWS_AS(c.load(dir), checkpoint_error);
    CHECK(c.step() == 0);
  }
  // Another rank count: a sub-communicator of rank 0 alone.
  MPI_Comm solo;
  MPI_Comm_split(MPI_COMM_WORLD, me == 0 ? 0 : MPI_UNDEFINED, 0, &solo);
  if (me == 0 && N > 1) {
    MpiComm one(solo);
    ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm> d(config(40), mixed_plan(1), one);
    std::string what;
    try {
      d.load(dir);
    } catch (const checkpoint_error& e) {
      what = e.what();
    }
    CHECK_MESSAGE(what.find("ranks") != std::string::npos, what);
  }
  if (solo != MPI_COMM_NULL) MPI_Comm_free(&solo);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) std::filesystem::remove_all(dir);
}

TEST_CASE("compressed communication: FP16/BF16 on the wire, half the vector bytes, bounded error") {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank();
  if (N == 1) return;
  const ShardingPlan p = table_wise_plan(kRows, kD, N);
  const std::size_t TD = kRows.size() * kD;
  const std::vector<float> w0 = initial_weights();
  for (CommPrecision prec : {CommPrecision::Fp16, CommPrecision::Bf16}) {
    ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> exact(config(0), p, comm);
    ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> lossy(config(0), p, comm, {prec});
    exact.set_weights(w0);
    lossy.set_weights(w0);
    const Batch l = local_batch(me, 3, false);
    std::vector<float> o1(static_cast<std::size_t>(l.B) * TD), o2(o1.size());
    exact.forward(l.idx, l.off, o1);
    lossy.forward(l.idx, l.off, o2);
    const double rel = prec == CommPrecision::Fp16 ? 0x1p-10 : 0x1p-7;  // one ulp of the format (stochastic)
    for (std::size_t i = 0; i < o1.size(); ++i)
      CHECK(std::fabs(o2[i] - o1[i]) <= rel * std::fabs(o1[i]) + 1e-7);
    CHECK(2 * lossy.comm_stats().vector_bytes == exact.comm_stats().vector_bytes);
  }
}

TEST_CASE("a rank with an empty local batch (B_local = 0) takes part in the step") {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank();
  const std::size_t TD = kRows.size() * kD;
  for (const ShardingPlan& p : {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N), mixed_plan(N)}) {
    ShardedEmbedding<Fp32, Lru<4>, StochasticRounding, MpiComm> sh(config(40), p, comm);
    CachedEmbedding<Fp32, Lru<4>, StochasticRounding> ref(config(40));
    const std::vector<float> w0 = initial_weights();
    sh.set_weights(w0);
    ref.set_weights(w0);
    // Rank 0 passes no samples; the global batch is the other ranks' batches.
    std::vector<Batch> loc;
    for (int s = 0; s < N; ++s) loc.push_back(s == 0 ? Batch{} : local_batch(s, 4, false));
    Batch g;
    std::vector<std::int64_t> first;
    for (auto& l : loc) first.push_back(g.B), g.B += l.B;
    for (std::size_t t = 0; t < kRows.size(); ++t)
      for (auto& l : loc)
        for (std::int64_t i = 0; i < l.B; ++i) {
          const auto j = static_cast<std::size_t>(static_cast<std::int64_t>(t) * l.B + i);
          for (auto q = l.off[j]; q < l.off[j + 1]; ++q) g.idx.push_back(l.idx[static_cast<std::size_t>(q)]);
          g.off.push_back(static_cast<std::int64_t>(g.idx.size()));
        }
    const Batch& l = loc[static_cast<std::size_t>(me)];
    std::vector<float> og(static_cast<std::size_t>(g.B) * TD), ol(static_cast<std::size_t>(l.B) * TD);
    if (g.B > 0) ref.forward(g.idx, g.off, og);
    sh.forward(l.idx, l.off, ol);
    bool has_row = false;  // row-wise outputs are exact only for single-owner bags
    for (const auto& ts : p.tables) has_row = has_row || ts.kind == ShardKind::Row;
    if (!has_row)
      CHECK(same_bits(ol.data(),
                      og.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                      ol.size()));
    const std::vector<float> gg = global_grad(g.B, 4);
    if (g.B > 0) ref.backward(gg, Sgd{0.5f});
    sh.backward(
        std::span<const float>(gg.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                               ol.size()),
        Sgd{0.5f});
    std::vector<float> a(w0.size()), b(w0.size());
    ref.get_weights(a);
    sh.get_weights(b);
    CHECK(same_bits(a.data(), b.data(), a.size()));
  }
}

namespace {

// A directory name every rank agrees on (rank 0's temp path, broadcast).
std::filesystem::path shared_dir(const std::string& tag) {
  std::vector<char> name(256, '\0');
  if (world().rank() == 0) {
    const std::string s =
        (std::filesystem::temp_directory_path() / ("mpe_dist_" + tag + "_" + std::to_string(getpid())))
            .string();
    std::copy(s.begin(), s.end(), name.begin());
  }
  world().broadcast(std::span<char>(name), 0);
  return std::filesystem::path(name.data());
}

void remove_shared(const std::filesystem::path& dir) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
}

// Steps k0..k1-1 of the global schedule on a sharded object; appends this rank's outputs.
template <class E, class Opt>
void sharded_steps(E& e, int k0, int k1, const Opt& opt, std::vector<float>* outputs = nullptr) {
  const int N = world().size(), me = world().rank();
  const std::size_t TD = kRows.size() * kD;
  for (int k = k0; k < k1; ++k) {
    std::vector<std::int64_t> first;
    const Batch g = global_batch(N, k, false, &first);
    const Batch l = local_batch(me, k, false);
    std::vector<float> o(static_cast<std::size_t>(l.B) * TD);
    e.forward(l.idx, l.off, o);
    if (outputs) outputs->insert(outputs->end(), o.begin(), o.end());
    const std::vector<float> gg = global_grad(g.B, k);
    e.backward(
        std::span<const float>(gg.data() + static_cast<std::size_t>(first[static_cast<std::size_t>(me)]) * TD,
                               static_cast<std::size_t>(l.B) * TD),
        opt);
  }
}

// Every rank's value of x agrees (min == max over the ranks).
bool all_ranks_agree(std::int64_t x) {
  std::int64_t v[2] = {x, -x};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return v[0] == -v[1];
}

}  // namespace

TEST_CASE("#40 item 2: after load() the optimizer guard follows the checkpoint on every rank") {
  MpiComm& comm = world();
  const int N = comm.size();
  const std::filesystem::path dir = shared_dir("opt_guard");
  // Rank 0 owns every table: ranks 1..N-1 own none (their guard cannot ask a local table).
  ShardingPlan p = table_wise_plan(kRows, kD, N);
  for (auto& t : p.tables) t.owner = 0;
  p.validate();
  using E = ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm>;
  E a(config(0), p, comm);
  a.init_uniform(-0.1f, 0.1f);
  sharded_steps(a, 0, 2, RowwiseAdagrad{0.2f});
  a.save(dir);
  std::vector<float> wa(static_cast<std::size_t>(a.total_rows()) * kD), wb(wa.size());
  std::vector<float> oa, ob;
  sharded_steps(a, 2, 4, RowwiseAdagrad{0.2f}, &oa);
  a.get_weights(wa);
  // An object that trained with Sgd continues the loaded RowwiseAdagrad checkpoint exactly.
  E b(config(0), p, comm);
  b.init_uniform(-0.1f, 0.1f);
  sharded_steps(b, 0, 1, Sgd{0.1f});
  b.load(dir);
  CHECK(b.step() == 2);
  std::string what;
  try {
    sharded_steps(b, 2, 4, RowwiseAdagrad{0.2f}, &ob);
  } catch (const std::exception& e) {
    what = e.what();
  }
  CHECK_MESSAGE(what.empty(), what);
  b.get_weights(wb);
  CHECK(same_bits(wa.data(), wb.data(), wa.size()));
  CHECK((oa.size() == ob.size() && same_bits(oa.data(), ob.data(), oa.size())));
  // A fresh object that loaded it refuses Sgd on every rank, tables or not; no rank steps.
  E c(config(0), p, comm);
  c.load(dir);
  int logic = 0;
  try {
    sharded_steps(c, 2, 3, Sgd{0.1f});
  } catch (const std::logic_error& e) {
    logic = std::string(e.what()).find("optimizer changed from rowwise_adagrad to sgd") != std::string::npos;
  }
  CHECK(logic == 1);
  CHECK(c.step() == 2);
  CHECK(all_ranks_agree(static_cast<std::int64_t>(c.step())));
  remove_shared(dir);
}

TEST_CASE("#40 item 3: a failed save at the committed step leaves that checkpoint loadable as it was") {
  MpiComm& comm = world();
  const int N = comm.size(), me = comm.rank(), bad = N - 1;
  const std::filesystem::path dir = shared_dir("save_fail");
  const ShardingPlan p = mixed_plan(N);  // table 0 lives on the last rank
  using E = ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm>;
  E a(config(40), p, comm);
  a.init_uniform(-0.1f, 0.1f);
  sharded_steps(a, 0, 3, Sgd{0.3f});
  a.save(dir);
  std::vector<float> committed(static_cast<std::size_t>(a.total_rows()) * kD), w(committed.size());
  a.get_weights(committed);
  const std::vector<float> w1 = initial_weights();  // other weights, same step
  a.set_weights(w1);
  auto load_weights = [&] {
    E r(config(40), p, comm);
    r.load(dir);
    CHECK(r.step() == 3);
    r.get_weights(w);
  };
  // (a) The last rank cannot create the directory (a path below a regular file stands in
  // for its file system failing); the other ranks must not have written anything.
  const std::filesystem::path blocker =
      std::filesystem::temp_directory_path() /
      ("mpe_dist_blocker_" + std::to_string(getpid()) + "_" + std::to_string(me));
  std::ofstream(blocker) << "x";
  int failed = 0;
  try {
    a.save(me == bad ? blocker / "sub" : dir);
  } catch (const std::runtime_error&) {
    failed = 1;
  }
  CHECK(failed == 1);
  std::filesystem::remove(blocker);
  load_weights();
  CHECK(same_bits(w.data(), committed.data(), w.size()));
  // (b) The last rank sees the directory but cannot write its shard: it names `dir` by a
  // path of 4,080 characters (`dir/./././...`), so the shard's path passes PATH_MAX (4,096)
  // while the directory's does not. The other ranks' shards of this attempt are written, but
  // must not replace any file of the committed checkpoint.
  std::string longer = dir.string();
  while (longer.size() < 4078) longer += "/.";
  const std::filesystem::path long_dir(longer);  // 4,078 or 4,079 characters
  failed = 0;
  try {
    a.save(me == bad ? long_dir : dir);
  } catch (const std::runtime_error&) {
    failed = 1;
  }
  CHECK(failed == 1);
  load_weights();
  CHECK(same_bits(w.data(), committed.data(), w.size()));
  // A later save at the same step commits the new weights (a name no attempt used).
  a.save(dir);
  std::vector<float> now(w.size());
  a.get_weights(now);
  load_weights();
  CHECK(same_bits(w.data(), now.data(), w.size()));
  remove_shared(dir);
}

TEST_CASE(
    "#40 item 1: FP16/BF16 communication with stochastic rounding resumes bit for bit; precision checked") {
  MpiComm& comm = world();
  const int N = comm.size();
  using E = ShardedEmbedding<Int8Rowwise, Lru<4>, StochasticRounding, MpiComm>;
  for (const ShardingPlan& p : {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N)})
    for (CommPrecision prec : {CommPrecision::Fp32, CommPrecision::Fp16, CommPrecision::Bf16}) {
      const std::filesystem::path dir = shared_dir("comm_resume");
      E a(config(0), p, comm, {prec});
      a.init_uniform(-0.1f, 0.1f);
      sharded_steps(a, 0, 3, Sgd{0.5f});
      a.save(dir);
      std::vector<float> oa, ob, wa(static_cast<std::size_t>(a.total_rows()) * kD), wb(wa.size());
      sharded_steps(a, 3, 6, Sgd{0.5f}, &oa);
      a.get_weights(wa);
      E b(config(0), p, comm, {prec});
      b.load(dir);
      sharded_steps(b, 3, 6, Sgd{0.5f}, &ob);
      b.get_weights(wb);
      CHECK(same_bits(wa.data(), wb.data(), wa.size()));
      CHECK((oa.size() == ob.size() && same_bits(oa.data(), ob.data(), oa.size())));
      // Another comm precision than the checkpoint's: refused on every rank, nothing changed.
      const CommPrecision other = prec == CommPrecision::Fp32 ? CommPrecision::Fp16 : CommPrecision::Fp32;
      E c(config(0), p, comm, {other});
      std::string what;
      try {
        c.load(dir);
      } catch (const checkpoint_error& e) {
        what = e.what();
      }
      CHECK_MESSAGE(what.find("comm_precision") != std::string::npos, what);
      CHECK(c.step() == 0);
      remove_shared(dir);
    }
}

TEST_CASE(
    "#40 item 5: stochastic rounding keyed by the global row: table/row-wise Int8, Int4, FP8 = one process") {
  const int N = world().size();
  for (const ShardingPlan& p : {table_wise_plan(kRows, kD, N), row_wise_plan(kRows, kD, N)}) {
    check_equivalence<Int8Rowwise, Lru<4>, StochasticRounding>(p, Sgd{0.5f}, 0, Pooling::Sum, false);
    check_equivalence<Int4Rowwise, Lru<4>, StochasticRounding>(p, RowwiseAdagrad{0.3f}, 0, Pooling::Mean,
                                                               false);
    check_equivalence<Fp8E4M3Rowwise, Lru<4>, StochasticRounding>(p, Sgd{0.5f}, 0, Pooling::Sum, true);
    check_equivalence<Int8Rowwise, Lru<4>, StochasticRounding>(p, Adam{0.01f}, 0, Pooling::Sum, false);
  }
}
