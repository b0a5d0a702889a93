// SPDX-License-Identifier: Apache-2.0
// Checkpoints mid-pipeline and values a file cannot hold: a save with a prefetch pending
// resumes exactly (the minimal case, and under Validation::Deferred); version-1, version-2
// and version-3 files still load (the call counter they imply); a file whose checksums are
// valid but whose values the state cannot hold
// (store rows that decode to NaN/inf, non-finite cached rows, optimizer state outside its
// domain, an unknown optimizer kind, a bad pending batch) is refused with
// mpe::checkpoint_error naming section, row and value, and the object is unchanged.
#include <limits>
#include <mpe/io/checkpoint_format.hpp>

#include "io/checkpoint_common.hpp"
#include "reference/policy_lists.hpp"

namespace {

namespace fmt = mpe::io::checkpoint;

// ---- a small independent walker of the documented layout (versions 1 to 4) ----
struct Layout {
  std::size_t header_bytes = 0, version_at = 8, n_sections_at = 0;
  std::vector<std::string> names;
  std::vector<std::size_t> at, len;  // payload offset and length per section
};

std::uint32_t get32(const std::vector<std::uint8_t>& b, std::size_t p) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + p, 4);
  return v;
}
void put32(std::vector<std::uint8_t>& b, std::size_t p, std::uint32_t v) { std::memcpy(b.data() + p, &v, 4); }

Layout walk(const std::vector<std::uint8_t>& b) {
  Layout l;
  l.header_bytes = get32(b, 12);
  l.n_sections_at = l.header_bytes - 8;  // u32 n_sections, then the header CRC
  const std::uint32_t n = get32(b, l.n_sections_at);
  std::size_t p = l.header_bytes;
  for (std::uint32_t i = 0; i < n; ++i) {
    std::uint16_t k;
    std::memcpy(&k, b.data() + p, 2);
    l.names.emplace_back(reinterpret_cast<const char*>(b.data() + p + 2), k);
    p += 2 + k;
    std::uint64_t len;
    std::memcpy(&len, b.data() + p, 8);
    p += 8;
    l.at.push_back(p);
    l.len.push_back(static_cast<std::size_t>(len));
    p += static_cast<std::size_t>(len) + 4;
  }
  return l;
}

/// Offset of the header's `str optimizer` field (versions 2 to 4), walking the documented header.
std::size_t optimizer_field(const std::vector<std::uint8_t>& b) {
  std::size_t p = 16;
  auto skip_str = [&] {
    std::uint16_t n;
    std::memcpy(&n, b.data() + p, 2);
    p += 2 + n;
  };
  skip_str();  // storage
  skip_str();  // cache policy
  p += 4;      // ways
  skip_str();  // rounding
  const std::uint32_t T = get32(b, p);
  p += 4 + 8 * T;
  // dim, row_alignment; store_row_bytes, num_sets, cache_slots, policy_words, seed, step,
  // populate_counter, decay_clock
  return p + 4 + 4 + 8 * 8;
}

/// Recomputes every checksum (header, sections, file) after an edit.
void resign(std::vector<std::uint8_t>& b) {
  const Layout l = walk(b);
  put32(b, l.header_bytes - 4, fmt::crc32c(b.data(), l.header_bytes - 4));
  for (std::size_t i = 0; i < l.at.size(); ++i)
    put32(b, l.at[i] + l.len[i], fmt::crc32c(b.data() + l.at[i], l.len[i]));
  put32(b, b.size() - 4, fmt::crc32c(b.data(), b.size() - 4));
}

std::size_t section(const Layout& l, const std::string& name) {
  for (std::size_t i = 0; i < l.names.size(); ++i) {
    if (l.names[i] == name) return i;
  }
  FAIL("no section " << name);
  return 0;
}

/// Offset of the header's `u64 calls` field (version 4): the last field before n_sections.
std::size_t calls_field(const Layout& l) { return l.n_sections_at - 8; }

/// The version-3 form of a version-4 file: the same bytes without the header's `u64 calls`.
std::vector<std::uint8_t> to_v3(const std::vector<std::uint8_t>& b) {
  REQUIRE(get32(b, 8) == 4);
  const Layout l = walk(b);
  const std::size_t at = calls_field(l);
  std::vector<std::uint8_t> v(b.begin(), b.begin() + static_cast<long>(at));
  v.insert(v.end(), b.begin() + static_cast<long>(at + 8), b.end());
  put32(v, 8, 3);
  put32(v, 12, static_cast<std::uint32_t>(l.header_bytes - 8));
  const std::uint64_t size = v.size();
  std::memcpy(v.data() + v.size() - 12, &size, 8);
  resign(v);
  return v;
}

/// `snap` (ckt::snapshot of an object, header first) with the header's call counter set to
/// `calls` and the header checksum recomputed: the snapshot of an object that loaded the
/// same state with that counter.
std::vector<std::uint8_t> with_calls(std::vector<std::uint8_t> snap, std::uint64_t calls) {
  const std::size_t H = get32(snap, 12);
  std::memcpy(snap.data() + H - 16, &calls, 8);  // then u32 n_sections, u32 header CRC
  put32(snap, H - 4, fmt::crc32c(snap.data(), H - 4));
  return snap;
}

/// The message synchronize() throws for `e`'s recorded deferred error ("" if none).
template <class E>
std::string deferred_error(E& e) {
  try {
    e.synchronize();
  } catch (const std::invalid_argument& x) {
    return x.what();
  }
  return "";
}

/// The version-2 form of a version-3 file of Lru, Lfu or DirectMapped with FP32 state:
/// version 2, the header's `policy_words` becomes `sketch_width` (words / 4: the sketch
/// has 4 lines), no `str state_precision`, the policy's section is named `sketch`, and
/// there is no `optimizer_cache` section (8 sections).
std::vector<std::uint8_t> to_v2(const std::vector<std::uint8_t>& b) {
  const Layout l = walk(b);
  REQUIRE(l.names.size() == 9);
  REQUIRE(l.names[8] == "optimizer_cache");
  REQUIRE(l.len[8] == 0);  // FP32 state: cached rows keep no copy
  const std::size_t opt_at = optimizer_field(b);
  const std::size_t words_at = opt_at - 5 * 8;  // then seed, step, populate, decay_clock
  std::uint16_t k;
  std::memcpy(&k, b.data() + opt_at, 2);
  const std::size_t precision_at = opt_at + 2 + k + 4;  // after str optimizer, u32 optimizer_state_floats
  std::uint16_t pk;
  std::memcpy(&pk, b.data() + precision_at, 2);
  REQUIRE(std::string(b.begin() + static_cast<long>(precision_at + 2),
                      b.begin() + static_cast<long>(precision_at + 2 + pk)) == "fp32");
  const std::size_t cut = 2 + std::size_t{pk};
  // Header without the state_precision field.
  std::vector<std::uint8_t> v(b.begin(), b.begin() + static_cast<long>(precision_at));
  v.insert(v.end(), b.begin() + static_cast<long>(precision_at + cut),
           b.begin() + static_cast<long>(l.header_bytes));
  put32(v, 8, 2);
  put32(v, 12, static_cast<std::uint32_t>(l.header_bytes - cut));
  put32(v, l.n_sections_at - cut, 8);
  std::int64_t words;
  std::memcpy(&words, b.data() + words_at, 8);
  const std::int64_t width = words / 4;
  std::memcpy(v.data() + words_at, &width, 8);
  // Sections 0 to 4 as they are; section 5 renamed; 6 and 7 as they are; no section 8.
  const std::size_t name5_at = l.at[5] - 8 - 2 - l.names[5].size();
  v.insert(v.end(), b.begin() + static_cast<long>(l.header_bytes), b.begin() + static_cast<long>(name5_at));
  const std::string sketch = "sketch";
  const auto n = static_cast<std::uint16_t>(sketch.size());
  v.push_back(static_cast<std::uint8_t>(n & 0xff));
  v.push_back(static_cast<std::uint8_t>(n >> 8));
  v.insert(v.end(), sketch.begin(), sketch.end());
  const std::size_t name8_at = l.at[8] - 8 - 2 - l.names[8].size();
  v.insert(v.end(), b.begin() + static_cast<long>(l.at[5] - 8), b.begin() + static_cast<long>(name8_at));
  v.insert(v.end(), b.end() - static_cast<long>(fmt::kTrailerBytes), b.end());
  const std::uint64_t size = v.size();
  std::memcpy(v.data() + v.size() - 12, &size, 8);
  resign(v);
  return v;
}

template <class E>
std::string load_error(E& e, const std::vector<std::uint8_t>& bytes) {
  try {
    mpe::io::load_from_bytes(e, bytes, "mem");
  } catch (const mpe::checkpoint_error& x) {
    return x.what();
  }
  return "";
}

/// load_bytes throws checkpoint_error whose message holds every part, and `e` keeps its
/// state (snapshot and weights).
template <class E>
void expect_refused(E& e, const std::vector<std::uint8_t>& bytes, const std::vector<std::string>& parts) {
  const auto before = ckt::snapshot(e);
  const auto w = ckt::weights(e);
  const std::string what = load_error(e, bytes);
  CAPTURE(what);
  REQUIRE_FALSE(what.empty());
  for (const auto& p : parts) CHECK(what.find(p) != std::string::npos);
  CHECK(ckt::snapshot(e) == before);
  CHECK(ckt::same_bits(ckt::weights(e), w));
}

}  // namespace

TEST_CASE("issue case: a checkpoint taken with a prefetch pending resumes with the prefetched batch") {
  // Fp32 store, Lru cache of 4 rows, 8 rows, D = 2: forward [0, 1]; prefetch [2, 3];
  // backward with gradient 1; save; load into a fresh object; forward [2, 3] on both.
  using E = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::StochasticRounding>;
  mpe::EmbeddingConfig c;
  c.table_rows = {8};
  c.dim = 2;
  c.cache_rows = 4;
  c.seed = 1;
  const auto path = ckt::temp_dir("pending_minimal") / "p.ckpt";
  const std::vector<std::int64_t> off = {0, 1, 2}, first = {0, 1}, second = {2, 3};
  std::vector<float> out(4), grad(4, 1.0f);
  E a(c);
  a.init_uniform(-1.0f, 1.0f);
  a.forward(first, off, out);
  a.prefetch(second, off);
  a.backward(grad, mpe::Sgd{0.1f});
  a.save(path);
  E b(c);
  b.load(path);
  std::vector<float> out_a(4), out_b(4);
  a.forward(second, off, out_a);
  b.forward(second, off, out_b);
  CHECK(ckt::same_bits(out_a, out_b));
  const mpe::CacheStats sa = a.stats(), sb = b.stats();
  CHECK(sa.lookups == 4);  // the prefetch counted [2, 3]; the forward of it counts nothing
  CHECK(sb.lookups == 4);
  CHECK(sb.unique_rows == 4);
  CHECK(sb.hits == 0);
  CHECK(ckt::same_stats(sa, sb));
  a.backward(grad, mpe::Sgd{0.1f});
  b.backward(grad, mpe::Sgd{0.1f});
  CHECK(ckt::same_bits(ckt::weights(a), ckt::weights(b)));
  CHECK(ckt::snapshot(a) == ckt::snapshot(b));
}

TEST_CASE("a checkpoint with a prefetch pending resumes exactly under Validation::Deferred too") {
  ckt::check_resume_pipelined<mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>>(
      ckt::temp_dir("pending_deferred"), mpe::Validation::Deferred);
}

TEST_CASE("a pending batch that is not used after load changes nothing: a different forward populates") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto c = ckt::small_config(5);
  const auto path = ckt::temp_dir("pending_unused") / "p.ckpt";
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  for (std::uint64_t k = 0; k < 4; ++k) ckt::pipelined_step(a, k, mpe::Sgd{0.1f});
  a.save(path);
  E b(c);
  b.load(path);
  // Both go on with another batch than the prefetched one (batch 20 instead of 4).
  for (std::uint64_t k = 20; k < 25; ++k) {
    CHECK(
        ckt::same_bits(ckt::pipelined_step(a, k, mpe::Sgd{0.1f}), ckt::pipelined_step(b, k, mpe::Sgd{0.1f})));
  }
  CHECK(ckt::snapshot(a) == ckt::snapshot(b));
}

TEST_CASE("version-1, version-2 and version-3 checkpoints still load; other versions are refused") {
  using E = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>;
  const auto c = ckt::small_config(9);
  const auto dir = ckt::temp_dir("v1");
  E a(c);
  a.init_uniform(-0.5f, 0.5f);
  for (std::uint64_t k = 0; k < 5; ++k) ckt::train_step(a, k, mpe::RowwiseAdagrad{0.1f});
  a.save(dir / "v4.ckpt");
  const auto b4 = ckt::read_bytes(dir / "v4.ckpt");
  REQUIRE(get32(b4, 8) == 4);
  std::uint64_t calls, populate;
  std::memcpy(&calls, b4.data() + calls_field(walk(b4)), 8);
  std::memcpy(&populate, b4.data() + optimizer_field(b4) - 2 * 8, 8);  // populate_counter, decay_clock
  CHECK(calls == 12u);    // 5 forward() and 5 backward() calls, the prefetch() of steps 0 and 3
  CHECK(populate == 5u);  // the 2 prefetches and the 3 forwards that did not consume one
  // Versions 1 to 3 hold no call count: an object that loads one holds the calls the file
  // implies, populate_counter + step = 10 (the forwards that consumed a prefetch are not
  // counted), and every other part of `a`'s state.
  const std::vector<std::uint8_t> old = with_calls(ckt::snapshot(a), populate + a.step());
  // Version 3: the same file without the header's `calls`.
  const auto b3 = to_v3(b4);
  REQUIRE(get32(b3, 8) == 3);
  REQUIRE(walk(b3).names[5] == "lfu");
  {
    E loaded(c);
    CHECK(load_error(loaded, b3).empty());
    CHECK(ckt::snapshot(loaded) == old);
    // Under Validation::Deferred the next call after that load is number 11.
    auto cd = c;
    cd.validation = mpe::Validation::Deferred;
    E deferred(cd);
    CHECK(load_error(deferred, b3).empty());
    ckt::Batch bad = ckt::make_batch(c, 6, 5);
    REQUIRE_FALSE(bad.indices.empty());
    bad.indices[0] = 1000;
    std::vector<float> out(bad.grad.size());
    deferred.forward(bad.indices, bad.offsets, out);
    CHECK(deferred_error(deferred).find("forward (deferred, call 11)") != std::string::npos);
  }
  // Version 2: the policy section is named `sketch`, the header holds the sketch width.
  auto b = to_v2(b3);
  {
    E loaded(c);
    CHECK(load_error(loaded, b).empty());
    CHECK(ckt::snapshot(loaded) == old);
  }
  {  // versions 1 and 2 hold FP32 state: an object with another state precision refuses them
    using Bf = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<4>, mpe::StochasticRounding, mpe::HostBackend,
                                    mpe::StateBf16>;
    Bf bf(c);
    const auto before = ckt::snapshot(bf);
    CHECK_THROWS_WITH_AS(mpe::io::load_from_bytes(bf, b, "mem"),
                         doctest::Contains("optimizer state precision 'fp32' in file, 'bf16' here"),
                         std::invalid_argument);
    CHECK(ckt::snapshot(bf) == before);
  }
  Layout l = walk(b);
  REQUIRE(l.names.back() == "pending_batch");
  REQUIRE(l.len.back() == 0);
  // Version 1 = the same file with the optimizer numbered (u32 kind 2 = rowwise_adagrad)
  // instead of named, without the last section, version 1, n_sections 7.
  const std::size_t opt_at = optimizer_field(b);
  std::uint16_t name_len;
  std::memcpy(&name_len, b.data() + opt_at, 2);
  REQUIRE(std::string(b.begin() + static_cast<long>(opt_at + 2),
                      b.begin() + static_cast<long>(opt_at + 2 + name_len)) == "rowwise_adagrad");
  const std::size_t cut_from = l.at.back() - 8 - 2 - l.names.back().size();
  std::vector<std::uint8_t> v1(b.begin(), b.begin() + static_cast<long>(opt_at));
  v1.resize(v1.size() + 4);
  put32(v1, opt_at, 2);
  v1.insert(v1.end(), b.begin() + static_cast<long>(opt_at + 2 + name_len),
            b.begin() + static_cast<long>(cut_from));
  v1.insert(v1.end(), b.end() - static_cast<long>(fmt::kTrailerBytes), b.end());
  const std::size_t shrink = 2 + name_len - 4;
  put32(v1, 8, 1);
  put32(v1, 12, static_cast<std::uint32_t>(l.header_bytes - shrink));
  put32(v1, l.n_sections_at - shrink, 7);
  const std::uint64_t size = v1.size();
  std::memcpy(v1.data() + v1.size() - 12, &size, 8);
  resign(v1);
  E loaded(c);
  CHECK(load_error(loaded, v1).empty());
  CHECK(ckt::snapshot(loaded) == old);
  for (std::uint32_t v : {0u, 5u, 99u}) {
    auto bad = b4;
    put32(bad, 8, v);
    resign(bad);
    E e(c);
    expect_refused(e, bad,
                   {"format version " + std::to_string(v) + " in file; this build reads versions 1 to 4"});
  }
  auto wrong_count = b;  // a version-2 header claiming 7 sections
  put32(wrong_count, l.n_sections_at, 7);
  resign(wrong_count);
  E e(c);
  expect_refused(e, wrong_count, {"n_sections 7 in file, 8 here"});
}

TEST_CASE("issue case: load refuses values the format cannot hold, naming section, row and value") {
  // Int8, 10 rows, D = 4, cache of 4 rows, one row-wise Adagrad step, save; then change one
  // value and re-sign the checksums.
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  mpe::EmbeddingConfig c;
  c.table_rows = {10};
  c.dim = 4;
  c.cache_rows = 4;
  c.seed = 2;
  const auto path = ckt::temp_dir("values") / "v.ckpt";
  E src(c);
  src.init_uniform(-1.0f, 1.0f);
  const std::vector<std::int64_t> idx = {1, 2, 7}, off = {0, 2, 3};
  std::vector<float> out(8), grad(8, 0.25f);
  src.forward(idx, off, out);
  src.backward(grad, mpe::RowwiseAdagrad{0.1f});
  src.save(path);
  const auto good = ckt::read_bytes(path);
  const Layout l = walk(good);
  const std::size_t store = l.at[section(l, "store")], cache = l.at[section(l, "cache_rows")],
                    tags = l.at[section(l, "tags")], opt = l.at[section(l, "optimizer")];
  const std::size_t stride = src.store_row_bytes();  // D + 8 = 12
  E dst(c);
  dst.init_uniform(-2.0f, 2.0f);  // another state, to see that nothing changes
  CHECK(load_error(dst, good).empty());
  dst.init_uniform(-2.0f, 2.0f);

  auto with_float = [&](std::size_t at, float v) {
    auto b = good;
    std::memcpy(b.data() + at, &v, 4);
    resign(b);
    return b;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Store row 3: scale NaN, bias +inf; row 5: a scale so large that the top code overflows.
  expect_refused(dst, with_float(store + 3 * stride + 4, nan),
                 {"section 'store': row 3 element 0 decodes to nan", "int8_rowwise holds finite values"});
  expect_refused(dst, with_float(store + 3 * stride + 8, inf),
                 {"section 'store': row 3 element 0 decodes to inf"});
  {
    auto b = good;
    const float scale = 3e38f;
    std::memcpy(b.data() + store + 5 * stride + 4, &scale, 4);
    for (std::size_t d = 0; d < 4; ++d) b[store + 5 * stride + d] = 255;  // 3e38 * 255 overflows
    resign(b);
    expect_refused(dst, b, {"section 'store': row 5 element 0 decodes to inf"});
  }
  // A cached FP32 row holding NaN; the slot's row is named.
  std::int64_t slot = -1, row = -1;
  for (std::int64_t s = 0; s < 4 && slot < 0; ++s) {
    std::memcpy(&row, good.data() + tags + 8 * static_cast<std::size_t>(s), 8);
    if (row >= 0) slot = s;
  }
  REQUIRE(slot >= 0);
  expect_refused(dst, with_float(cache + (static_cast<std::size_t>(slot) * 4 + 1) * 4, nan),
                 {"section 'cache_rows': slot " + std::to_string(slot) + " (row " + std::to_string(row) +
                  ") element 1 = nan"});
  // An empty slot's stale row is never read: any value there loads.
  // Row-wise Adagrad state: -1, NaN and +inf are outside its domain.
  expect_refused(dst, with_float(opt + 2 * 4, -1.0f),
                 {"section 'optimizer': row 2 holds rowwise_adagrad state [-1]", "finite and >= 0"});
  expect_refused(dst, with_float(opt + 7 * 4, nan),
                 {"section 'optimizer': row 7 holds rowwise_adagrad state [nan]"});
  expect_refused(dst, with_float(opt + 0, inf), {"row 0 holds rowwise_adagrad state [inf]"});
  // An unknown optimizer, and a state size that does not match the optimizer at this D.
  const std::size_t opt_at = optimizer_field(good);
  REQUIRE(good[opt_at] == 15);  // "rowwise_adagrad"
  {
    auto b = good;
    b[opt_at + 2 + 14] = 'X';  // "rowwise_adagraX"
    resign(b);
    expect_refused(dst, b, {"optimizer 'rowwise_adagraX' is not an optimizer this build knows"});
  }
  const std::size_t floats_at = opt_at + 2 + 15;
  REQUIRE(get32(good, floats_at) == 1u);
  {
    auto b = good;
    put32(b, floats_at, 4);  // as if the state were element-wise (D floats)
    resign(b);
    expect_refused(dst, b,
                   {"optimizer_state_floats = 4 is invalid for optimizer 'rowwise_adagrad' (1 at dim 4)"});
  }
  // After all refusals the good file loads and gives the source's state.
  dst.load(path);
  CHECK(ckt::snapshot(dst) == ckt::snapshot(src));
}

TEST_CASE("store rows' padding: saved as zeros wherever the slot index lives, refused if not zero") {
  // Int8, D = 5: 13 data bytes. Row alignment 4: 16 B rows, 3 padding bytes; 32: 32 B rows,
  // where slot_index_in_rows puts each row's entry in the padding (byte 16).
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  for (const std::int32_t align : {4, 32}) {
    CAPTURE(align);
    auto cfg = [&](bool index) {
      mpe::EmbeddingConfig c;
      c.table_rows = {12};
      c.dim = 5;
      c.cache_rows = 4;
      c.seed = 9;
      c.row_alignment = align;
      c.slot_index = index;
      return c;
    };
    E plain(cfg(false)), indexed(cfg(true));
    CHECK(indexed.store_row_bytes() == plain.store_row_bytes() + (align == 4 ? 4u : 0u));
    const std::vector<std::int64_t> idx = {1, 2, 7, 11}, off = {0, 2, 4};
    std::vector<float> out(10), grad(10, 0.5f);
    for (E* e : {&plain, &indexed}) {
      e->init_uniform(-1.0f, 1.0f);
      e->forward(idx, off, out);
      e->backward(grad, mpe::RowwiseAdagrad{0.1f});
    }
    const auto good = mpe::io::save_to_bytes(plain);
    CHECK(mpe::io::save_to_bytes(indexed) == good);  // the entries are not saved
    const Layout l = walk(good);
    const std::size_t store = l.at[section(l, "store")];
    const std::size_t stride = align == 4 ? 16 : 32;  // the file's rows: data and zeros
    CHECK(l.len[section(l, "store")] == 12 * stride);
    for (std::size_t r = 0; r < 12; ++r)
      for (std::size_t k = 13; k < stride; ++k) REQUIRE(good[store + r * stride + k] == 0);
    auto bad = good;
    bad[store + 2 * stride + 13] = 7;
    resign(bad);
    E dst(cfg(true));
    dst.init_uniform(-2.0f, 2.0f);
    expect_refused(dst, bad,
                   {"section 'store': row 2 padding byte 13 = 7", "after a row's 13 data bytes are zeros"});
    CHECK(load_error(dst, good).empty());
    CHECK(mpe::io::save_to_bytes(dst) == good);
  }
}

TEST_CASE("load refuses a pending batch that is not valid input for the tables") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>;
  const auto c = ckt::small_config(4);  // tables of 40, 23 and 9 rows
  const auto path = ckt::temp_dir("pending_bad") / "p.ckpt";
  E src(c);
  src.init_uniform(-0.5f, 0.5f);
  ckt::pipelined_step(src, 0, mpe::Sgd{0.1f}, 2);
  src.save(path);
  const auto good = ckt::read_bytes(path);
  const Layout l = walk(good);
  const std::size_t pending = section(l, "pending_batch");
  const std::size_t at = l.at[pending];
  std::int64_t n, B;
  std::memcpy(&n, good.data() + at, 8);
  std::memcpy(&B, good.data() + at + 8, 8);
  REQUIRE(B == 2);
  REQUIRE(l.len[pending] == static_cast<std::size_t>(16 + 8 * (n + 3 * B + 1)));
  const std::size_t idx = at + 16, off = idx + 8 * static_cast<std::size_t>(n);
  auto with = [&](std::size_t p, std::int64_t v) {
    auto b = good;
    std::memcpy(b.data() + p, &v, 8);
    resign(b);
    return b;
  };
  E dst(c);
  dst.init_uniform(-1.0f, 1.0f);
  // Find an index of table 2 (9 rows): the bags 4 and 5.
  std::int64_t o4, o6;
  std::memcpy(&o4, good.data() + off + 4 * 8, 8);
  std::memcpy(&o6, good.data() + off + 6 * 8, 8);
  REQUIRE(o6 > o4);  // this batch has an index of table 2 (bags 4 and 5); else the case below tests nothing
  expect_refused(
      dst, with(idx + 8 * static_cast<std::size_t>(o4), 9),
      {"section 'pending_batch': indices[" + std::to_string(o4) + "] = 9 is outside table 2 (9 rows)"});
  expect_refused(dst, with(idx, -1), {"section 'pending_batch': indices[0] = -1 is outside table"});
  expect_refused(dst, with(off, 1), {"section 'pending_batch': offsets[0] = 1; must be 0"});
  expect_refused(dst, with(at + 8, 3),
                 {"section 'pending_batch': n = " + std::to_string(n) + ", B = 3 do not match"});
  expect_refused(dst, with(off + 8, n + 1),
                 {"section 'pending_batch': offsets[2] = ", "< offsets[1] = " + std::to_string(n + 1)});
  dst.load(path);
  CHECK(ckt::snapshot(dst) == ckt::snapshot(src));
}

namespace {
template <class O>
struct OptCase {
  using type = O;
  static O make() { return O{0.05f}; }
};
}  // namespace

TEST_CASE_TEMPLATE_DEFINE("every optimizer's state round-trips through a checkpoint exactly, at any D", P,
                          opt_round_trip) {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto opt = P::make();
  for (std::int32_t D : {1, 3, 64, 4096}) {
    CAPTURE(D);
    mpe::EmbeddingConfig c;
    c.table_rows = {9, 4};
    c.dim = D;
    c.cache_rows = 4;
    c.seed = 11;
    const auto path = ckt::temp_dir("optimizers") / "o.ckpt";
    E a(c);
    a.init_uniform(-0.5f, 0.5f);
    for (std::uint64_t k = 0; k < 4; ++k) ckt::pipelined_step(a, k, opt, 3);
    a.save(path);
    E b(c);
    b.load(path);
    CHECK(ckt::snapshot(a) == ckt::snapshot(b));
    CHECK(a.memory().optimizer_bytes ==
          static_cast<std::size_t>(13 * mpe::OptimizerRule<typename P::type>::state_floats(D)) * 4);
    bool same = true;
    for (std::uint64_t k = 4; k < 24; ++k) {
      same = ckt::same_bits(ckt::pipelined_step(a, k, opt, 3), ckt::pipelined_step(b, k, opt, 3)) && same;
    }
    CHECK(same);
    CHECK(ckt::same_bits(ckt::weights(a), ckt::weights(b)));
    CHECK(ckt::snapshot(a) == ckt::snapshot(b));
    // Another optimizer cannot take over the state: backward names both.
    E other(c);
    other.load(path);
    const auto batch = ckt::make_batch(c, 3, 99);
    std::vector<float> out(batch.grad.size());
    other.forward(batch.indices, batch.offsets, out);
    if constexpr (!std::is_same_v<typename P::type, mpe::Adam>) {
      CHECK_THROWS_AS(other.backward(batch.grad, mpe::Adam{0.1f}), std::logic_error);
    } else {
      CHECK_THROWS_AS(other.backward(batch.grad, mpe::Sgd{0.1f}), std::logic_error);
    }
  }
}
// Every optimizer of the one test list (tests/reference/policy_lists.hpp).
TEST_CASE_TEMPLATE_APPLY(opt_round_trip, mpe_test::product_t<OptCase, mpe_test::Optimizers>);

TEST_CASE("#40 item 7: load refuses step = 2^64 - 1 (the next step would wrap); 2^64 - 2 continues") {
  using E = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  mpe::EmbeddingConfig c;
  c.table_rows = {10};
  c.dim = 4;
  c.cache_rows = 4;
  c.seed = 2;
  E src(c);
  src.init_uniform(-1.0f, 1.0f);
  const std::vector<std::int64_t> idx = {1, 2, 7}, off = {0, 2, 3};
  std::vector<float> out(8), grad(8, 0.25f);
  src.forward(idx, off, out);
  src.backward(grad, mpe::Adam{0.01f});
  const std::vector<std::uint8_t> good = mpe::io::save_to_bytes(src);
  const std::size_t step_at = optimizer_field(good) - 3 * 8;  // step, populate_counter, decay_clock
  std::uint64_t step;
  std::memcpy(&step, good.data() + step_at, 8);
  REQUIRE(step == 1u);
  auto with_step = [&](std::uint64_t s) {
    auto b = good;
    std::memcpy(b.data() + step_at, &s, 8);
    resign(b);
    return b;
  };
  E dst(c);
  dst.init_uniform(-2.0f, 2.0f);
  expect_refused(dst, with_step(~std::uint64_t{0}), {"step = 18446744073709551615", "cannot be continued"});
  CHECK(dst.step() == 0u);
  CHECK(load_error(dst, with_step(~std::uint64_t{0} - 1)).empty());
  CHECK(dst.step() == ~std::uint64_t{0} - 1);
  dst.forward(idx, off, out);
  dst.backward(grad, mpe::Adam{0.01f});  // t = 2^64 - 1: bias corrections 1, finite
  std::vector<float> w(40);
  dst.get_weights(w);
  bool finite = true;
  for (float x : w) finite = finite && std::isfinite(x);
  CHECK(finite);
}

TEST_CASE(
    "#40 item 7: the call counter is checkpointed; load refuses calls below populate_counter or past 2^63 - "
    "2") {
  using E = mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding>;
  mpe::EmbeddingConfig c;
  c.table_rows = {10};
  c.dim = 4;
  c.cache_rows = 4;
  c.seed = 2;
  E src(c);
  src.init_uniform(-1.0f, 1.0f);
  const std::vector<std::int64_t> idx = {1, 2, 7}, off = {0, 2, 3}, bad_idx = {1, 2, 70};
  std::vector<float> out(8), grad(8, 0.25f);
  src.prefetch(idx, off);
  src.forward(idx, off, out);
  src.backward(grad, mpe::Sgd{0.1f});
  const std::vector<std::uint8_t> good = mpe::io::save_to_bytes(src);
  const std::size_t calls_at = calls_field(walk(good));
  std::uint64_t calls, populate;
  std::memcpy(&calls, good.data() + calls_at, 8);
  std::memcpy(&populate, good.data() + optimizer_field(good) - 2 * 8, 8);  // populate_counter, decay_clock
  REQUIRE(calls == 3u);                                                    // prefetch, forward, backward
  REQUIRE(populate == 1u);  // the prefetch (the forward consumed it)
  auto with = [&](std::uint64_t v) {
    auto b = good;
    std::memcpy(b.data() + calls_at, &v, 8);
    resign(b);
    return b;
  };
  E dst(c);
  dst.init_uniform(-2.0f, 2.0f);  // another state, to see that nothing changes
  expect_refused(dst, with(0), {"calls = 0 is below populate_counter = 1"});
  const auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  expect_refused(dst, with(max), {"calls = 9223372036854775807 cannot be continued"});
  expect_refused(dst, with(~std::uint64_t{0}), {"calls = 18446744073709551615 cannot be continued"});
  // The bounds themselves load, and a deferred error after the load is numbered from them.
  auto cd = c;
  cd.validation = mpe::Validation::Deferred;
  for (const std::uint64_t v : {populate, calls, max - 1}) {
    CAPTURE(v);
    E e(cd);
    REQUIRE(load_error(e, with(v)).empty());
    std::uint64_t saved;
    const std::vector<std::uint8_t> again = mpe::io::save_to_bytes(e);
    std::memcpy(&saved, again.data() + calls_at, 8);
    CHECK(saved == v);
    e.forward(bad_idx, off, out);
    CHECK(deferred_error(e).find("forward (deferred, call " + std::to_string(v + 1) + ")") !=
          std::string::npos);
  }
}
