// SPDX-License-Identifier: Apache-2.0
// The host's AVX-512 row stores (detail/host/avx512/encode.hpp: INT8, INT4, INT2) and its
// AVX2 ones (detail/host/avx2/encode.hpp) against the portable code they replace, byte
// for byte:
// - simd512::philox16 and simd::philox8 give num::philox4x32_10's four words for each of
//   their 16 / 8 counters (random keys and counters, word 3 varying by lane as the element
//   groups do);
// - simd512::store_int8 writes Int8Rowwise::store's bytes (codes, scale, bias), and
//   simd512::store_fused_nbit Int4Rowwise's and Int2Rowwise's (packed codes, FP16 scale and
//   bias), under stochastic and nearest rounding for D = 1 .. 200: rows of many magnitudes, mixed +-0
//   (a zero minimum too), tiny ranges (the 2^64 pre-scale), rows at the format's limit,
//   values on the code grid, random row keys, group bases (column keys), steps and sites;
//   and declines (writes nothing) where the scalar code sanitizes, the INT8 scale rounds to
//   0 or an N-bit row is constant; simd::store_int8 / store_fused_nbit the same (the same
//   rows); store_row's dispatch gives the scalar bytes either way;
// - a training run (write-backs, flushes, store updates, set_weights; INT8 and INT4) with
//   the AVX-512 path on, and with only the AVX2 path, gives the store bytes of the run with
//   both off.
// On a CPU without AVX-512 F/BW/VL (or a build without it) the AVX-512 checks are skipped,
// and without AVX2 + F16C the AVX2 ones (reported).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mpe/mpe.hpp>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "mpe/detail/host/dispatch.hpp"
#include "reference/embedding_bag.hpp"

namespace {

/// A test row of case t: D = 1 .. 200 floats of kind t % 8 and random rounding keys.
struct TestRow {
  std::vector<float> x;
  int kind;
  mpe::num::RowRng rng;
};
[[maybe_unused]] TestRow make_row(std::mt19937_64& gen, int t, float limit) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int D = 1 + static_cast<int>(gen() % 200);
  std::vector<float> x(static_cast<std::size_t>(D));
  const int kind = t % 8;
  const float mag = std::ldexp(1.0f, static_cast<int>(gen() % 40) - 20);
  for (auto& v : x) v = mag * u(gen);
  if (kind == 1) {  // mixed signed zeros and a few values
    for (auto& v : x) v = gen() % 3 == 0 ? 0.0f : (gen() % 2 ? -0.0f : mag * u(gen));
  } else if (kind == 2) {  // a tiny range: 255 / range overflows, the 2^64 pre-scale
    for (auto& v : x) v = std::ldexp(1.0f + 0.5f * std::fabs(u(gen)), -130);
  } else if (kind == 3) {  // at the format's limit
    for (auto& v : x) v = limit * u(gen);
    x[0] = limit;
    x[static_cast<std::size_t>(D - 1)] = -limit;
  } else if (kind == 4) {  // constant: the scale is 0
    for (auto& v : x) v = mag;
  } else if (kind == 5) {  // something the scalar code sanitizes
    x[gen() % static_cast<std::size_t>(D)] =
        gen() % 2 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (kind == 7) {  // min a zero of either sign: the sequential scan's sign
    for (auto& v : x) v = gen() % 3 == 0 ? (gen() % 2 ? 0.0f : -0.0f) : mag * std::fabs(u(gen));
  } else if (kind == 6) {  // values already on the code grid
    for (auto& v : x) v = static_cast<float>(gen() % 256);
  }
  mpe::num::RowRng rng;
  rng.seed = gen();
  rng.row = gen() >> (gen() % 64);
  rng.step = static_cast<std::uint32_t>(gen());
  rng.site = static_cast<mpe::num::RoundingSite>(1 + gen() % 11);
  // A column key (EmbeddingConfig::column_keys / 4) in half the rows, near 2^24 in some: the
  // group counter wraps there.
  rng.group_base = gen() % 2 ? 0u : gen() % 4 ? static_cast<std::uint32_t>(gen() % 4096) : 0xfffff8u;
  return TestRow{std::move(x), kind, rng};
}

#if MPE_HOST_AVX512
/// The AVX-512 path: simd512::philox16 and simd512::store_int8 / store_fused_nbit.
struct Avx512 {
  static constexpr int lanes = 16;
  static constexpr const char* name = "AVX-512";
  static bool cpu() { return mpe::detail::cpu_has_avx512(); }
  __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"))) static void philox(
      std::uint32_t x, std::uint32_t y, std::uint32_t z, const std::uint32_t* w, std::uint32_t k0,
      std::uint32_t k1, std::uint32_t out[4][16]) {
    __m512i blocks[4];
    mpe::detail::simd512::philox16(x, y, z, _mm512_loadu_si512(w), k0, k1, blocks);
    for (int i = 0; i < 4; ++i) _mm512_storeu_si512(out[i], blocks[i]);
  }
  /// The store of format S under rounding R (false: declined, nothing written).
  template <class S, class R>
  static bool store(const float* x, std::int32_t D, std::uint8_t* row, const mpe::num::RowRng& rng) {
    if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
      return mpe::detail::simd512::store_int8<R>(x, D, row, rng);
    } else {
      return mpe::detail::simd512::store_fused_nbit<S::bits, R>(x, D, row, rng, S::limit);
    }
  }
};
#endif

#if MPE_HOST_SIMD
/// The AVX2 path: simd::philox8 and simd::store_int8 / store_fused_nbit.
struct Avx2 {
  static constexpr int lanes = 8;
  static constexpr const char* name = "AVX2";
  static bool cpu() { return mpe::detail::cpu_has_avx2_f16c(); }
  __attribute__((target("avx2,f16c"))) static void philox(std::uint32_t x, std::uint32_t y, std::uint32_t z,
                                                          const std::uint32_t* w, std::uint32_t k0,
                                                          std::uint32_t k1, std::uint32_t out[4][16]) {
    __m256i blocks[4];
    mpe::detail::simd::philox8(x, y, z, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)), k0, k1,
                               blocks);
    for (int i = 0; i < 4; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i]), blocks[i]);
  }
  template <class S, class R>
  static bool store(const float* x, std::int32_t D, std::uint8_t* row, const mpe::num::RowRng& rng) {
    if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
      return mpe::detail::simd::store_int8<R>(x, D, row, rng);
    } else {
      return mpe::detail::simd::store_fused_nbit<S::bits, R>(x, D, row, rng, S::limit);
    }
  }
};

/// Restores the host SIMD switches (AVX2 and AVX-512) on scope exit.
struct SimdSwitches {
  bool simd = mpe::detail::host_simd_flag();
  bool avx512 = mpe::detail::set_host_avx512(true);
  ~SimdSwitches() {
    mpe::detail::set_host_simd(simd);
    mpe::detail::set_host_avx512(avx512);
  }
};

/// Path P's Philox words equal num::philox4x32_10's for each of its P::lanes counters.
template <class P>
void check_philox(std::uint64_t seed) {
  if (!P::cpu()) {
    MESSAGE("CPU without " << std::string(P::name) << ": skipped");
    return;
  }
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 2000; ++t) {
    const auto x = static_cast<std::uint32_t>(rng()), y = static_cast<std::uint32_t>(rng()),
               z = static_cast<std::uint32_t>(rng()), k0 = static_cast<std::uint32_t>(rng()),
               k1 = static_cast<std::uint32_t>(rng());
    std::uint32_t w[16];
    for (auto& v : w) v = static_cast<std::uint32_t>(rng());
    std::uint32_t got[4][16];
    P::philox(x, y, z, w, k0, k1, got);
    for (int l = 0; l < P::lanes; ++l) {
      const mpe::num::Uint4 want = mpe::num::philox4x32_10(mpe::num::Uint4{x, y, z, w[l]}, k0, k1);
      CAPTURE(t);
      CAPTURE(l);
      REQUIRE(got[0][l] == want.x);
      REQUIRE(got[1][l] == want.y);
      REQUIRE(got[2][l] == want.z);
      REQUIRE(got[3][l] == want.w);
    }
  }
}

/// Path P's store of format S writes Storage::store's bytes (stochastic and nearest rounding)
/// on 6000 rows of make_row, or declines (writes nothing) where the scalar code sanitizes or
/// the row is constant; store_row, with the host switches set so that it takes path P, gives
/// the scalar bytes either way.
template <class S, class P>
void check_stores(std::uint64_t seed) {
  if (!P::cpu()) {
    MESSAGE("CPU without " << std::string(P::name) << ": skipped");
    return;
  }
  SimdSwitches keep;
  mpe::detail::set_host_avx512(P::lanes == 16);
  std::mt19937_64 gen(seed);
  int stored = 0, declined = 0;
  for (int t = 0; t < 6000; ++t) {
    const TestRow row = make_row(gen, t, S::limit);
    const std::vector<float>& x = row.x;
    const int D = static_cast<int>(x.size()), kind = row.kind;
    const mpe::num::RowRng& rng = row.rng;
    const std::size_t bytes = S::data_bytes(D);
    std::vector<std::uint8_t> want(bytes, 0xab), got(bytes, 0xab), near(bytes, 0xab), near_got(bytes, 0xab);
    const bool saturated = S::template store<mpe::StochasticRounding>(x.data(), D, want.data(), rng);
    S::template store<mpe::NearestRounding>(x.data(), D, near.data(), rng);
    CAPTURE(t);
    CAPTURE(D);
    CAPTURE(kind);
    const bool nearest_done = P::template store<S, mpe::NearestRounding>(x.data(), D, near_got.data(), rng);
    if (P::template store<S, mpe::StochasticRounding>(x.data(), D, got.data(), rng)) {
      ++stored;
      REQUIRE(nearest_done);
      REQUIRE(std::memcmp(want.data(), got.data(), bytes) == 0);
      REQUIRE(std::memcmp(near.data(), near_got.data(), bytes) == 0);
    } else {
      ++declined;
      // Only a row the scalar code sanitizes, or a constant one (its min equals its max).
      const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
      CHECK((saturated || *lo == *hi));
      for (const auto b : got) REQUIRE(b == 0xab);  // nothing written
    }
    // The dispatch gives the scalar bytes either way.
    std::vector<std::uint8_t> via(bytes, 0xab), via_near(bytes, 0xab);
    mpe::detail::store_row<S, mpe::StochasticRounding>(x.data(), D, via.data(), rng);
    mpe::detail::store_row<S, mpe::NearestRounding>(x.data(), D, via_near.data(), rng);
    REQUIRE(std::memcmp(want.data(), via.data(), bytes) == 0);
    REQUIRE(std::memcmp(near.data(), via_near.data(), bytes) == 0);
  }
  MESSAGE(stored << " rows stored by the " << std::string(P::name) << " path, " << declined << " declined");
  CHECK(stored > 4000);
}
#endif

}  // namespace

#if MPE_HOST_AVX512
TEST_CASE("philox16 equals num::philox4x32_10 lane by lane") { check_philox<Avx512>(3); }

TEST_CASE_TEMPLATE("the AVX-512 store writes Storage::store's bytes (stochastic and nearest rounding)", S,
                   mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  check_stores<S, Avx512>(17);
}
#else
TEST_CASE("AVX-512 row store: compiled out") { MESSAGE("a build without the AVX-512 path: skipped"); }
#endif  // MPE_HOST_AVX512

#if MPE_HOST_SIMD
TEST_CASE("philox8 equals num::philox4x32_10 lane by lane") { check_philox<Avx2>(4); }

TEST_CASE_TEMPLATE("the AVX2 store writes Storage::store's bytes (stochastic and nearest rounding)", S,
                   mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  check_stores<S, Avx2>(19);
}

TEST_CASE_TEMPLATE("training with the SIMD row stores gives the bytes of the portable store", S,
                   mpe::Int8Rowwise, mpe::Int4Rowwise) {
  if (!mpe::detail::cpu_has_avx2_f16c()) {
    MESSAGE("CPU without AVX2 + F16C: skipped");
    return;
  }
  using E = mpe::CachedEmbedding<S, mpe::Lru<4>, mpe::StochasticRounding>;
  const std::vector<std::int64_t> tables{60, 9, 200};
  // 0: no SIMD (the portable store and pooling); 1: AVX2 only; 2: AVX-512 where the CPU has it.
  const auto run = [&](int path) {
    SimdSwitches keep;
    mpe::detail::set_host_simd(path > 0);
    mpe::detail::set_host_avx512(path > 1);
    E e(mpe::EmbeddingConfig{.table_rows = tables, .dim = 37, .cache_rows = 24, .seed = 5});
    std::mt19937_64 rng(8);
    e.init_uniform(-0.3f, 0.3f);
    const auto part = ref::random_floats(rng, 10 * 37, -1, 1);
    e.set_weights(part, 40);
    std::vector<float> out(static_cast<std::size_t>(8 * 3 * 37));
    for (int step = 0; step < 20; ++step) {
      const ref::Batch b = ref::random_batch(rng, tables, 8, 5, step % 2 == 0);
      e.forward(b.indices, b.offsets, out, mpe::Pooling::Sum, b.weights);
      e.backward(ref::random_floats(rng, out.size(), -1, 1), mpe::Adagrad{0.2f});
    }
    e.flush();
    const mpe::EmbeddingRef<S> r = e.ref();
    std::vector<std::uint8_t> store(r.store,
                                    r.store + static_cast<std::size_t>(e.total_rows()) * e.store_row_bytes());
    return std::make_pair(store, e.stats());
  };
  const auto [portable, stats_portable] = run(0);
  CHECK(stats_portable.writebacks > 0);
  for (int path = 1; path <= 2; ++path) {
    CAPTURE(path);
    const auto [got, stats] = run(path);
    CHECK(got == portable);
    CHECK(stats.writebacks == stats_portable.writebacks);
  }
}
#else
TEST_CASE("SIMD row stores: compiled out") { MESSAGE("a build without the host SIMD paths: skipped"); }
#endif  // MPE_HOST_SIMD
