// SPDX-License-Identifier: Apache-2.0
// mpe::TieredRows against a plain-loop simulator written here from the documented rules
// (std::map of hot ids, std::vector of u8 counters saturating at 255 with the documented
// cell formula, std::set of free rows): every occurrence's row, every move, the stats,
// hot_ids() and the sketch bytes after each of thousands of Zipf-like batches; u8
// saturation; exact resume from save_bytes(); load_bytes()'s refusals;
// bad ids and bad config fields; copy_moved_rows() on a CachedEmbedding; P = 0; lookup().
// Everything is compared exactly (integers and copied float bits): no tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <mpe/cache/lru.hpp>
#include <mpe/embedding/cached_embedding.hpp>
#include <mpe/embedding/tiered_rows.hpp>
#include <mpe/numeric/rounding.hpp>
#include <mpe/storage/fp32.hpp>
#include <mpe/storage/int8_rowwise.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

using u8 = std::uint8_t;
using u32 = std::uint32_t;
using i64 = std::int64_t;

/// The documented rules, re-implemented with ordered containers and no hash table.
struct Sim {
  i64 ids, p, s;
  u32 promote_at, demote_below;
  i64 decay_every, w;
  std::uint64_t seed;
  std::map<i64, std::pair<i64, u32>> hot;  // id -> (row, exact count)
  std::vector<u8> sketch;                  // u8 counters, saturating at 255
  std::set<i64> free_rows;
  i64 clock = 0;
  mpe::TieredRowsStats st{};
  std::vector<mpe::TieredRows::Move> moves;

  explicit Sim(const mpe::TieredRowsConfig& c)
      : ids(c.ids),
        p(c.private_rows),
        s(c.shared_rows),
        promote_at(c.promote_at),
        demote_below(c.demote_below),
        decay_every(c.decay_every),
        w(c.sketch_width),
        seed(c.seed) {
    if (decay_every == 0) decay_every = 10 * std::max<i64>(p, 16);
    if (w == 0) {
      w = 1;
      while (w < std::max<i64>(64, p)) w *= 2;
    }
    sketch.assign(static_cast<std::size_t>(4 * w), 0);
    for (i64 r = 0; r < p; ++r) free_rows.insert(r);
  }
  i64 shared(i64 id) const {
    return p + static_cast<i64>(mpe::mix64(static_cast<std::uint64_t>(id) ^ seed) %
                                static_cast<std::uint64_t>(s));
  }
  std::size_t cell(i64 id, int k) const {
    const std::uint64_t key = static_cast<std::uint64_t>(id) ^ mpe::mix64(seed ^ 0x9e3779b97f4a7c15ull);
    const std::uint64_t h = mpe::mix64(key * 4u + static_cast<std::uint64_t>(k) + 0x5bd1e995u);
    return static_cast<std::size_t>(k * w) + static_cast<std::size_t>(h & static_cast<std::uint64_t>(w - 1));
  }
  i64 row(i64 id) const {
    const auto it = hot.find(id);
    return it != hot.end() ? it->second.first : shared(id);
  }
  std::vector<i64> map(const std::vector<i64>& batch) {
    if (clock >= decay_every) {
      for (u8& c : sketch) c = static_cast<u8>(c / 2);
      for (auto it = hot.begin(); it != hot.end();) {
        it->second.second /= 2;
        if (it->second.second < demote_below) {
          free_rows.insert(it->second.first);
          it = hot.erase(it);
          ++st.demotions;
        } else {
          ++it;
        }
      }
      ++st.decays;
      clock = 0;
    }
    moves.clear();
    const std::set<i64> unique(batch.begin(), batch.end());
    for (const i64 id : unique) {
      if (auto it = hot.find(id); it != hot.end()) {
        if (it->second.second < 0xffffffffu) ++it->second.second;
        continue;
      }
      u32 est = 255;
      for (int k = 0; k < 4; ++k) {
        u8& c = sketch[cell(id, k)];
        if (c < 255) ++c;
        est = std::min<u32>(est, c);
      }
      if (est < promote_at) continue;
      if (free_rows.empty()) {
        ++st.refused_promotions;
        continue;
      }
      const i64 r = *free_rows.begin();
      free_rows.erase(free_rows.begin());
      hot[id] = {r, est};
      moves.push_back({id, shared(id), r});
      ++st.promotions;
    }
    clock += static_cast<i64>(unique.size());
    std::vector<i64> rows;
    for (const i64 id : batch) {
      rows.push_back(row(id));
      ++(hot.count(id) ? st.private_lookups : st.shared_lookups);
      ++st.lookups;
    }
    return rows;
  }
};

/// Zipf-like ids: id = floor(ids * u^4) for uniform u, so low ids are far more frequent;
/// batches of 1 to max_n ids, repeats included.
struct Batches {
  std::mt19937_64 g;
  i64 ids;
  i64 max_n;
  std::vector<i64> next() {
    const i64 n = 1 + static_cast<i64>(g() % static_cast<std::uint64_t>(max_n));
    std::vector<i64> b(static_cast<std::size_t>(n));
    for (i64& id : b) {
      const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
      id = std::min<i64>(ids - 1, static_cast<i64>(static_cast<double>(ids) * u * u * u * u));
    }
    return b;
  }
};

void require_equal(const mpe::TieredRowsStats& a, const mpe::TieredRowsStats& b) {
  REQUIRE(a.lookups == b.lookups);
  REQUIRE(a.private_lookups == b.private_lookups);
  REQUIRE(a.shared_lookups == b.shared_lookups);
  REQUIRE(a.promotions == b.promotions);
  REQUIRE(a.demotions == b.demotions);
  REQUIRE(a.decays == b.decays);
  REQUIRE(a.refused_promotions == b.refused_promotions);
}

/// One map() call of `t` and the simulator on `batch`, everything compared.
void step(mpe::TieredRows& t, Sim& sim, const std::vector<i64>& batch) {
  std::vector<i64> rows(batch.size(), -7);
  t.map(batch, rows);
  const std::vector<i64> want = sim.map(batch);
  REQUIRE(rows == want);
  const auto mv = t.last_moves();
  REQUIRE(mv.size() == sim.moves.size());
  for (std::size_t i = 0; i < mv.size(); ++i) {
    REQUIRE(mv[i].id == sim.moves[i].id);
    REQUIRE(mv[i].from_row == sim.moves[i].from_row);
    REQUIRE(mv[i].to_row == sim.moves[i].to_row);
  }
  require_equal(t.stats(), sim.st);
  REQUIRE(t.hot_ids() == static_cast<i64>(sim.hot.size()));
  // The sketch's bytes (documented at offset 84 of save_bytes()) equal the simulator's.
  const std::vector<std::uint8_t> bytes = t.save_bytes();
  REQUIRE(bytes.size() >= 84 + sim.sketch.size());
  REQUIRE(std::memcmp(bytes.data() + 84, sim.sketch.data(), sim.sketch.size()) == 0);
}

mpe::TieredRowsConfig small_config() {
  return {.ids = 500,
          .private_rows = 8,
          .shared_rows = 37,
          .promote_at = 4,
          .demote_below = 3,
          .decay_every = 100,
          .sketch_width = 0,
          .seed = 11};
}

std::uint32_t crc_of(const std::vector<std::uint8_t>& b) {
  return mpe::io::checkpoint::crc32c(b.data(), b.size() - 4);
}
void reseal(std::vector<std::uint8_t>& b) {
  const std::uint32_t c = crc_of(b);
  std::memcpy(b.data() + b.size() - 4, &c, 4);
}

void require_refused(mpe::TieredRows& t, const std::vector<std::uint8_t>& bytes, const std::string& needle) {
  const std::vector<std::uint8_t> before = t.save_bytes();
  std::string msg;
  try {
    t.load_bytes(bytes);
  } catch (const mpe::checkpoint_error& e) {
    msg = e.what();
  }
  CAPTURE(msg);
  REQUIRE(msg.find(needle) != std::string::npos);
  REQUIRE(t.save_bytes() == before);
}

}  // namespace

TEST_CASE("TieredRows equals the simulator batch by batch (promotions, refusals, demotions)") {
  // Small P, a short decay period and demote_below close to promote_at, so that every
  // transition happens many times; then the default decay period / width with another seed.
  for (const mpe::TieredRowsConfig cfg : {small_config(), mpe::TieredRowsConfig{.ids = 3000,
                                                          .private_rows = 8,
                                                          .shared_rows = 101,
                                                          .promote_at = 6,
                                                          .demote_below = 3,
                                                          .seed = 0x1234567890abcdefull}}) {
    CAPTURE(cfg.ids);
    mpe::TieredRows t(cfg);
    Sim sim(cfg);
    REQUIRE(t.config().decay_every == sim.decay_every);
    REQUIRE(t.config().sketch_width == sim.w);
    REQUIRE(t.physical_rows() == cfg.private_rows + cfg.shared_rows);
    Batches gen{std::mt19937_64(5), cfg.ids, 40};
    for (int b = 0; b < 4000; ++b) step(t, sim, gen.next());
    CHECK(sim.st.promotions > 50);
    CHECK(sim.st.refused_promotions > 50);
    CHECK(sim.st.demotions > 50);
    CHECK(sim.st.decays > 50);
    // An empty batch runs the decay check only.
    step(t, sim, {});
    REQUIRE(t.last_moves().empty());
    // lookup() and row_of() give map()'s rows and change nothing.
    const std::vector<std::uint8_t> before = t.save_bytes();
    std::vector<i64> all(static_cast<std::size_t>(cfg.ids)), rows(all.size());
    for (i64 i = 0; i < cfg.ids; ++i) all[static_cast<std::size_t>(i)] = i;
    t.lookup(all, rows);
    for (i64 i = 0; i < cfg.ids; ++i) {
      REQUIRE(rows[static_cast<std::size_t>(i)] == sim.row(i));
      REQUIRE(t.row_of(i) == sim.row(i));
    }
    REQUIRE(t.save_bytes() == before);
    // After a map(), lookup() of the same ids gives map()'s rows.
    const std::vector<i64> batch = gen.next();
    std::vector<i64> mapped(batch.size()), looked(batch.size());
    t.map(batch, mapped);
    REQUIRE(mapped == sim.map(batch));
    t.lookup(batch, looked);
    REQUIRE(looked == mapped);
    // memory_bytes: 4 W (u8 sketch) + 12 P (owner i64, count u32) + 4 C (i32 index, C the
    // smallest power of two >= 2P).
    std::size_t cap = 1;
    while (cap < static_cast<std::size_t>(2 * cfg.private_rows)) cap *= 2;
    REQUIRE(t.memory_bytes() ==
            static_cast<std::size_t>(4 * sim.w) + 12 * static_cast<std::size_t>(cfg.private_rows) + 4 * cap);
  }
}

TEST_CASE("TieredRows::resolve and planned_memory_bytes equal what a built map reports") {
  // Defaults (0) and explicit values, P = 0, P not a power of two, P above the default sketch.
  for (const auto& [p, w, decay] : {std::tuple<i64, i64, i64>{0, 0, 0},
                                    {1, 0, 0},
                                    {37, 0, 0},
                                    {64, 0, 5},
                                    {65, 0, 0},
                                    {300, 128, 0},
                                    {500, 1, 7}}) {
    mpe::TieredRowsConfig cfg = small_config();
    cfg.private_rows = p;
    cfg.sketch_width = w;
    cfg.decay_every = decay;
    CAPTURE(p);
    const mpe::TieredRows t(cfg);
    const mpe::TieredRowsConfig r = mpe::TieredRows::resolve(cfg);
    CHECK(r.decay_every == t.config().decay_every);
    CHECK(r.sketch_width == t.config().sketch_width);
    CHECK(r.ids == t.config().ids);
    CHECK(r.private_rows == p);
    CHECK(mpe::TieredRows::planned_memory_bytes(cfg) == t.memory_bytes());
  }
}

TEST_CASE("TieredRows with P = 0: every id shares, every promotion is refused") {
  mpe::TieredRowsConfig cfg = small_config();
  cfg.private_rows = 0;
  mpe::TieredRows t(cfg);
  Sim sim(cfg);
  Batches gen{std::mt19937_64(9), cfg.ids, 30};
  for (int b = 0; b < 500; ++b) step(t, sim, gen.next());
  REQUIRE(t.hot_ids() == 0);
  REQUIRE(t.stats().promotions == 0);
  REQUIRE(t.stats().private_lookups == 0);
  REQUIRE(t.stats().refused_promotions > 0);
  for (i64 id = 0; id < cfg.ids; ++id) REQUIRE(t.row_of(id) == sim.shared(id));
  REQUIRE(t.memory_bytes() == static_cast<std::size_t>(4 * 64));  // the sketch only (W = 64)
}

TEST_CASE("TieredRows' u8 sketch counters saturate at 255 and do not wrap") {
  // One id counted in 300 batches (repeated in each, counted once a batch). P = 0: its 4
  // counters climb to 255 and stay there (a wrap would leave 300 mod 256 = 44), every batch
  // from the 255th on refuses its promotion; a decay then halves 255 to 127.
  mpe::TieredRowsConfig cfg = small_config();
  cfg.private_rows = 0;
  cfg.promote_at = 255;
  cfg.decay_every = 300;
  mpe::TieredRows t(cfg);
  Sim sim(cfg);
  constexpr i64 kId = 42;
  const auto sketch_of = [](const mpe::TieredRows& m) {
    const std::vector<std::uint8_t> b = m.save_bytes();
    const auto w = static_cast<std::size_t>(m.config().sketch_width);
    return std::vector<u8>(b.begin() + 84, b.begin() + 84 + static_cast<std::ptrdiff_t>(4 * w));
  };
  const auto require_cells = [&](const std::vector<u8>& sk, u8 want) {
    std::size_t nonzero = 0;
    for (const u8 c : sk) nonzero += c != 0;
    REQUIRE(nonzero == 4);  // one cell a line, every other counter untouched
    for (int k = 0; k < 4; ++k) REQUIRE(sk[sim.cell(kId, k)] == want);
  };
  for (int b = 1; b <= 300; ++b) {
    step(t, sim, {kId, kId});
    if (b == 254) REQUIRE(t.stats().refused_promotions == 0);
  }
  REQUIRE(t.stats().decays == 0);
  REQUIRE(t.stats().refused_promotions == 300 - 254);
  require_cells(sketch_of(t), 255);
  step(t, sim, {});  // the decay: 255 >> 1
  REQUIRE(t.stats().decays == 1);
  require_cells(sketch_of(t), 127);

  // P = 1: promoted at its 255th batch with count 255; the exact count (u32) goes on to
  // 300 while the sketch stays at 255.
  cfg.private_rows = 1;
  cfg.decay_every = 1000;
  mpe::TieredRows h(cfg);
  Sim hsim(cfg);
  for (int b = 1; b <= 300; ++b) {
    step(h, hsim, {kId});
    REQUIRE(h.hot_ids() == (b >= 255 ? 1 : 0));
    if (b == 255) REQUIRE(h.last_moves().size() == 1);
  }
  require_cells(sketch_of(h), 255);
  const std::vector<std::uint8_t> b = h.save_bytes();
  const std::size_t n_hot_at = 84 + 4 * static_cast<std::size_t>(h.config().sketch_width);
  i64 n_hot = 0, id = 0;
  std::int32_t row = -1;
  u32 count = 0;
  std::memcpy(&n_hot, &b[n_hot_at], 8);
  std::memcpy(&id, &b[n_hot_at + 8], 8);
  std::memcpy(&row, &b[n_hot_at + 16], 4);
  std::memcpy(&count, &b[n_hot_at + 20], 4);
  REQUIRE(n_hot == 1);
  REQUIRE(id == kId);
  REQUIRE(row == 0);
  REQUIRE(count == 300);
  REQUIRE(hsim.hot.at(kId).second == 300);
}

TEST_CASE("TieredRows resumes exactly from save_bytes") {
  const mpe::TieredRowsConfig cfg = small_config();
  mpe::TieredRows a(cfg);
  Sim sim(cfg);
  Batches gen{std::mt19937_64(21), cfg.ids, 40};
  for (int b = 0; b < 700; ++b) step(a, sim, gen.next());
  const std::vector<std::uint8_t> x = a.save_bytes();
  mpe::TieredRows b(cfg);
  b.load_bytes(x);
  REQUIRE(b.save_bytes() == x);
  REQUIRE(b.last_moves().empty());
  require_equal(b.stats(), a.stats());
  REQUIRE(b.hot_ids() == a.hot_ids());
  for (int k = 0; k < 1500; ++k) {
    const std::vector<i64> batch = gen.next();
    std::vector<i64> ra(batch.size()), rb(batch.size());
    a.map(batch, ra);
    b.map(batch, rb);
    REQUIRE(ra == rb);
    REQUIRE(a.last_moves().size() == b.last_moves().size());
    require_equal(a.stats(), b.stats());
    if (k % 100 == 0) REQUIRE(a.save_bytes() == b.save_bytes());
  }
  REQUIRE(a.save_bytes() == b.save_bytes());
  // reset_stats zeroes the counters only.
  b.reset_stats();
  REQUIRE(b.stats().lookups == 0);
  REQUIRE(b.stats().decays == 0);
  REQUIRE(b.hot_ids() == a.hot_ids());
}

TEST_CASE("TieredRows::load_bytes refuses bad bytes and changes nothing") {
  const mpe::TieredRowsConfig cfg = small_config();
  mpe::TieredRows src(cfg);
  Batches gen{std::mt19937_64(3), cfg.ids, 40};
  std::vector<i64> rows;
  for (int b = 0; b < 300; ++b) {
    const auto batch = gen.next();
    rows.resize(batch.size());
    src.map(batch, rows);
  }
  REQUIRE(src.hot_ids() >= 3);
  const std::vector<std::uint8_t> good = src.save_bytes();
  mpe::TieredRows t(cfg);  // a state of its own, that a refused load must keep
  for (int b = 0; b < 50; ++b) {
    const auto batch = gen.next();
    rows.resize(batch.size());
    t.map(batch, rows);
  }
  // Offsets of the documented layout.
  const std::size_t w = static_cast<std::size_t>(t.config().sketch_width);
  const std::size_t n_hot_at = 84 + 4 * w, hot_at = n_hot_at + 8;
  const i64 n_hot = src.hot_ids();
  const std::size_t n_free_at = hot_at + 16 * static_cast<std::size_t>(n_hot), free_at = n_free_at + 8;
  REQUIRE(good.size() == free_at + 4 * static_cast<std::size_t>(cfg.private_rows - n_hot) + 56 + 4);

  auto x = good;
  x.resize(good.size() - 9);
  require_refused(t, x, "truncated");
  x.resize(40);
  require_refused(t, x, "truncated");
  x = good;
  x[hot_at + 3] ^= 0x10;
  require_refused(t, x, "CRC-32C mismatch");
  x = good;
  x[3] = 'X';
  require_refused(t, x, "magic");
  x = good;
  x[8] = 1;
  require_refused(t, x, "version 1 (u32 sketch counters) is not read");
  x[8] = 3;
  require_refused(t, x, "version 3 is not 2");
  {
    mpe::TieredRowsConfig other = cfg;
    other.demote_below = 2;
    mpe::TieredRows o(other);
    require_refused(t, o.save_bytes(), "config field demote_below = 2 differs from this object's 3");
    other = cfg;
    other.seed = 12;
    require_refused(t, mpe::TieredRows(other).save_bytes(), "config field seed");
  }
  const auto put32 = [](std::vector<std::uint8_t>& b, std::size_t at, std::int32_t v) {
    std::memcpy(&b[at], &v, 4);
  };
  const auto put64 = [](std::vector<std::uint8_t>& b, std::size_t at, i64 v) { std::memcpy(&b[at], &v, 8); };
  // Duplicate hot id: entry 1 takes entry 0's id.
  x = good;
  i64 id0;
  std::memcpy(&id0, &good[hot_at], 8);
  put64(x, hot_at + 16, id0);
  reseal(x);
  require_refused(t, x, "duplicate or unsorted hot id");
  // Hot id out of range.
  x = good;
  put64(x, hot_at + 16 * static_cast<std::size_t>(n_hot - 1), cfg.ids);
  reseal(x);
  require_refused(t, x, "id outside [0, 500)");
  // Duplicate row: entry 1 takes entry 0's row.
  x = good;
  std::int32_t row0;
  std::memcpy(&row0, &good[hot_at + 8], 4);
  put32(x, hot_at + 16 + 8, row0);
  reseal(x);
  require_refused(t, x, "duplicate row");
  // Row >= P.
  x = good;
  put32(x, hot_at + 8, static_cast<std::int32_t>(cfg.private_rows));
  reseal(x);
  require_refused(t, x, "row 8 outside [0, private_rows = 8)");
  // A free row that is also a hot id's row.
  if (cfg.private_rows > n_hot) {
    x = good;
    put32(x, free_at, row0);
    reseal(x);
    require_refused(t, x, "free row");
  }
  // A hot count below demote_below (3 here): no sequence of batches leaves one.
  x = good;
  put32(x, hot_at + 12, 2);
  reseal(x);
  require_refused(t, x, "count 2 below demote_below = 3");
  // n_hot above P.
  x = good;
  put64(x, n_hot_at, cfg.private_rows + 1);
  reseal(x);
  require_refused(t, x, "n_hot = 9");
  // A negative stat.
  x = good;
  put64(x, good.size() - 4 - 8, -1);
  reseal(x);
  require_refused(t, x, "refused_promotions = -1");
  // Counters loaded near INT64_MAX saturate instead of overflowing.
  x = good;
  put64(x, good.size() - 4 - 56, INT64_MAX - 1);  // stats.lookups
  reseal(x);
  {
    mpe::TieredRows near(cfg);
    near.load_bytes(x);
    std::vector<i64> three(3);
    near.map(std::vector<i64>{1, 2, 3}, three);
    REQUIRE(near.stats().lookups == INT64_MAX);
  }
  // The good bytes load.
  t.load_bytes(good);
  REQUIRE(t.save_bytes() == good);
}

TEST_CASE("TieredRows: bad ids and bad config fields") {
  const mpe::TieredRowsConfig cfg = small_config();
  mpe::TieredRows t(cfg);
  std::vector<i64> rows(3);
  t.map(std::vector<i64>{1, 2, 1}, rows);
  const std::vector<std::uint8_t> before = t.save_bytes();
  const auto moves_before = t.last_moves().size();
  for (const i64 bad : {i64{-1}, cfg.ids}) {
    const std::vector<i64> ids{0, 3, bad};
    const std::string needle = "ids[2] = " + std::to_string(bad) + " outside [0, 500)";
    std::string msg;
    try {
      t.map(ids, rows);
    } catch (const std::out_of_range& e) {
      msg = e.what();
    }
    CHECK(msg.find(needle) != std::string::npos);
    msg.clear();
    try {
      t.lookup(ids, rows);
    } catch (const std::out_of_range& e) {
      msg = e.what();
    }
    CHECK(msg.find(needle) != std::string::npos);
    msg.clear();
    try {
      (void)t.row_of(bad);
    } catch (const std::out_of_range& e) {
      msg = e.what();
    }
    CHECK(msg.find("id = " + std::to_string(bad) + " outside [0, 500)") != std::string::npos);
  }
  std::vector<i64> two(2);
  CHECK_THROWS_WITH_AS(t.map(std::vector<i64>{1, 2, 3}, two), doctest::Contains("rows.size() = 2"),
                       std::invalid_argument);
  REQUIRE(t.save_bytes() == before);
  REQUIRE(t.last_moves().size() == moves_before);
  REQUIRE(t.stats().lookups == 3);

  struct Bad {
    const char* field;
    mpe::TieredRowsConfig c;
  };
  const auto with = [&](auto f) {
    mpe::TieredRowsConfig c = cfg;
    f(c);
    return c;
  };
  const Bad bads[] = {
      {"ids = 0", with([](auto& c) {
         c.ids = 0;
         c.private_rows = 0;
       })},
      {"private_rows = -1", with([](auto& c) { c.private_rows = -1; })},
      {"private_rows = 501", with([](auto& c) { c.private_rows = 501; })},
      {"shared_rows = 0", with([](auto& c) { c.shared_rows = 0; })},
      {"shared_rows = 4611686018427387897", with([](auto& c) { c.shared_rows = (i64{1} << 62) - 7; })},
      {"promote_at = 0", with([](auto& c) {
         c.promote_at = 0;
         c.demote_below = 0;
       })},
      {"promote_at = 256", with([](auto& c) { c.promote_at = 256; })},
      {"demote_below = 5", with([](auto& c) { c.demote_below = 5; })},
      {"decay_every = -1", with([](auto& c) { c.decay_every = -1; })},
      {"sketch_width = 48", with([](auto& c) { c.sketch_width = 48; })},
      {"sketch_width = -64", with([](auto& c) { c.sketch_width = -64; })},
      {"sketch_width = 2147483648", with([](auto& c) { c.sketch_width = i64{1} << 31; })},
  };
  for (const Bad& b : bads) {
    CAPTURE(b.field);
    const auto needle = std::string("TieredRowsConfig::") + b.field;
    CHECK_THROWS_WITH_AS(mpe::TieredRows{b.c}, doctest::Contains(needle.c_str()), std::invalid_argument);
    // The planner's entry points check as the constructor does.
    CHECK_THROWS_WITH_AS((void)mpe::TieredRows::resolve(b.c), doctest::Contains(needle.c_str()),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS((void)mpe::TieredRows::planned_memory_bytes(b.c), doctest::Contains(needle.c_str()),
                         std::invalid_argument);
  }
  // The edges of the ranges are accepted.
  CHECK_NOTHROW(mpe::TieredRows(with([](auto& c) { c.private_rows = c.ids; })));
  CHECK_NOTHROW(mpe::TieredRows(with([](auto& c) {
    c.demote_below = c.promote_at;
    c.sketch_width = 1;
  })));
  CHECK_NOTHROW(mpe::TieredRows(with([](auto& c) { c.promote_at = 255; })));
}

namespace {

/// copy_moved_rows() on an embedding of type Emb whose second table is the tiered one:
/// after each map(), the store equals the one before with every move's private row replaced
/// by its shared row's values (bit for bit; get_weights() reads both).
template <class Emb>
void check_copy_moved_rows() {
  // One table of 5 rows before this one, so the table's first row is 5.
  const mpe::TieredRowsConfig cfg{.ids = 200,
                                  .private_rows = 4,
                                  .shared_rows = 9,
                                  .promote_at = 2,
                                  .demote_below = 1,
                                  .decay_every = 1000,
                                  .seed = 3};
  mpe::TieredRows t(cfg);
  constexpr i64 kFirst = 5;
  constexpr int kD = 6;
  Emb emb(
      mpe::EmbeddingConfig{.table_rows = {kFirst, t.physical_rows()}, .dim = kD, .cache_rows = 8, .seed = 1});
  std::vector<float> w(static_cast<std::size_t>((kFirst + t.physical_rows()) * kD));
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = 0.25f * static_cast<float>(i % 23) - 3.0f + 0.01f * static_cast<float>(i);
  emb.set_weights(w);
  std::vector<i64> rows(3);
  int copied = 0;
  for (int b = 0; b < 6; ++b) {
    t.map(std::vector<i64>{7, 8, 9}, rows);  // promoted at their second batch (promote_at 2)
    std::vector<float> before(w.size()), after(w.size());
    emb.get_weights(before);
    t.copy_moved_rows(emb, kFirst);
    emb.get_weights(after);
    std::vector<float> want = before;
    for (const auto& m : t.last_moves()) {
      for (int d = 0; d < kD; ++d)
        want[static_cast<std::size_t>((kFirst + m.to_row) * kD + d)] =
            before[static_cast<std::size_t>((kFirst + m.from_row) * kD + d)];
      ++copied;
    }
    REQUIRE(std::memcmp(after.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
  REQUIRE(copied == 3);
  REQUIRE(t.last_moves().empty());
  CHECK_THROWS_AS(t.copy_moved_rows(emb, -1), std::invalid_argument);
}

}  // namespace

TEST_CASE("TieredRows::copy_moved_rows copies the shared row into the private row") {
  check_copy_moved_rows<mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>>();
  // INT8 rowwise: a dequantized row quantizes back to the same bytes, so the copy is exact too.
  check_copy_moved_rows<mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>>();
  // The callable overload (MixedDimEmbedding's shape) performs the same copies.
  const mpe::TieredRowsConfig cfg{.ids = 20, .private_rows = 2, .shared_rows = 3, .promote_at = 2};
  mpe::TieredRows u(cfg);
  std::vector<i64> two(2), one(1);
  u.map(std::vector<i64>{4, 4}, two);
  u.map(std::vector<i64>{4}, one);
  REQUIRE(u.last_moves().size() == 1);
  std::vector<std::pair<i64, i64>> calls;
  u.copy_moved_rows(
      3, 10,
      [&](std::span<float> out, i64 r) {
        calls.emplace_back(0, r);
        REQUIRE(out.size() == 3);
        out[0] = 1.5f;
      },
      [&](std::span<const float> in, i64 r) {
        calls.emplace_back(1, r);
        REQUIRE(in[0] == 1.5f);
      });
  REQUIRE(calls.size() == 2);
  REQUIRE(calls[0].second == 10 + u.last_moves()[0].from_row);
  REQUIRE(calls[1].second == 10 + u.last_moves()[0].to_row);
  CHECK_THROWS_AS(u.copy_moved_rows(
                      0, 0, [](std::span<float>, i64) {}, [](std::span<const float>, i64) {}),
                  std::invalid_argument);
}
