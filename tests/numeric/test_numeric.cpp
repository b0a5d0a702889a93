// SPDX-License-Identifier: Apache-2.0
// Numeric core (numeric/): FP16/BF16 conversion against an independent IEEE reference,
// stochastic rounding statistics, rint_even, pairwise_sum's fixed order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <mpe/detail/kernels/update.hpp>
#include <mpe/numeric/half.hpp>
#include <mpe/numeric/philox.hpp>
#include <mpe/numeric/reduce.hpp>
#include <mpe/numeric/rounding.hpp>
#include <mpe/storage/all.hpp>
#include <random>
#include <vector>

namespace {

// ---------------- independent references (written from the IEEE 754 bit layouts) ----------------

/// IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits.
double ref_half_value(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  }
  return s ? -v : v;
}

/// bfloat16: the top 16 bits of a binary32 (1 sign, 8 exponent bits bias 127, 7 mantissa).
double ref_bf16_value(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -133);
  } else if (e == 255) {
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1.0 + m / 128.0, e - 127);
  }
  return s ? -v : v;
}

struct RefFormat {
  double (*value)(std::uint16_t);
  std::uint16_t max_bits;  // largest finite positive pattern; patterns 0..max_bits increase in value
  double above_max;        // the grid point after the largest finite value: 2^(emax + 1)
};
const RefFormat kHalf{ref_half_value, 0x7bff, 65536.0};
const RefFormat kBf16{ref_bf16_value, 0x7f7f, 0x1p128};

/// Largest pattern h in [0, max_bits] with value(h) <= a (a >= 0, finite).
std::uint16_t ref_floor_bits(const RefFormat& f, double a) {
  std::uint32_t lo = 0, hi = f.max_bits;  // value(lo) <= a
  if (f.value(static_cast<std::uint16_t>(hi)) <= a) return static_cast<std::uint16_t>(hi);
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (f.value(static_cast<std::uint16_t>(mid)) <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return static_cast<std::uint16_t>(lo);
}

struct RefNarrow {
  std::uint16_t bits;
  bool saturated;
};

/// Round-to-nearest-even into the format; magnitudes whose rounding leaves the finite range
/// saturate to the largest finite value (mpe's documented convention), NaN -> +0.
RefNarrow ref_nearest(const RefFormat& f, float x) {
  if (std::isnan(x)) return {0, true};
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return {static_cast<std::uint16_t>(sign | f.max_bits), true};
  const std::uint16_t lo = ref_floor_bits(f, a);
  const double vlo = f.value(lo);
  if (vlo == a) return {static_cast<std::uint16_t>(sign | lo), false};
  // next grid point above lo: lo + 1, or for the top binade the (virtual) 2^(emax+1)
  const double vhi = lo == f.max_bits ? f.above_max : f.value(static_cast<std::uint16_t>(lo + 1));
  const double dlo = a - vlo, dhi = vhi - a;  // exact: few significant bits each
  bool up = dhi < dlo || (dhi == dlo && (lo & 1));
  if (!up) return {static_cast<std::uint16_t>(sign | lo), false};
  if (lo == f.max_bits) return {static_cast<std::uint16_t>(sign | f.max_bits), true};
  return {static_cast<std::uint16_t>(sign | (lo + 1)), false};
}

float f32(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

bool same_bits_or_both_nan(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::memcmp(&a, &b, 4) == 0;
}

}  // namespace

// --------------------------------- FP16 / BF16 decode ---------------------------------

TEST_CASE("half_to_float and bf16_to_float decode every pattern like the IEEE reference") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const float got = mpe::num::half_to_float(b);
    const double want = ref_half_value(b);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(got));
    } else {
      REQUIRE(static_cast<double>(got) == want);
      REQUIRE(std::signbit(got) == static_cast<bool>(h >> 15));
    }
    const float gb = mpe::num::bf16_to_float(b);
    const double wb = ref_bf16_value(b);
    if (std::isnan(wb)) {
      REQUIRE(std::isnan(gb));
    } else {
      REQUIRE(static_cast<double>(gb) == wb);
    }
  }
}

// ------------------------------ FP16 / BF16 nearest encode -----------------------------

namespace {
template <class Enc>
void check_nearest_at(const RefFormat& f, Enc enc, float x) {
  const RefNarrow want = ref_nearest(f, x);
  const mpe::num::NarrowResult got = enc(x);
  INFO("x = " << x << " (bits 0x" << std::hex << mpe::num::float_bits(x) << ")");
  REQUIRE(got.saturated == want.saturated);
  if (std::isnan(x)) {
    REQUIRE(f.value(got.bits) == 0.0);  // NaN saturates to zero
  } else {
    REQUIRE(got.bits == want.bits);
  }
}

auto half_nearest = [](float x) { return mpe::num::float_to_half<mpe::NearestRounding>(x); };
auto bf16_nearest = [](float x) { return mpe::num::float_to_bf16<mpe::NearestRounding>(x); };
}  // namespace

TEST_CASE("float_to_half<Nearest> matches the reference on a sweep of float32 bit patterns") {
  // every 4099th pattern (odd stride: visits all exponents, both signs, NaN, Inf, subnormals)
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099)
    check_nearest_at(kHalf, half_nearest, f32(static_cast<std::uint32_t>(u)));
  for (float x : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, -65520.0f, 0x1p-24f, 0x1p-25f,
                  0x1.8p-25f, 0x1p-26f, 0x1p-14f, 0x1.ffcp-15f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    check_nearest_at(kHalf, half_nearest, x);
  }
}

TEST_CASE("float_to_half<Nearest>: all halves, their midpoints (ties to even) and neighbours") {
  for (std::uint32_t h = 0; h <= 0x7bff; ++h) {
    for (float sgn : {1.0f, -1.0f}) {
      const float v = sgn * static_cast<float>(ref_half_value(static_cast<std::uint16_t>(h)));
      check_nearest_at(kHalf, half_nearest, v);
      // midpoint to the next half: 12 significant bits, exact in float
      const double next = h < 0x7bff ? ref_half_value(static_cast<std::uint16_t>(h + 1)) : 65536.0;
      const float mid = sgn * static_cast<float>((ref_half_value(static_cast<std::uint16_t>(h)) + next) / 2);
      check_nearest_at(kHalf, half_nearest, mid);
      check_nearest_at(kHalf, half_nearest, std::nextafter(mid, 0.0f));
      check_nearest_at(kHalf, half_nearest, std::nextafter(mid, sgn * 1e30f));
    }
  }
}

TEST_CASE("float_to_bf16<Nearest> matches the reference on a sweep of float32 bit patterns") {
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099)
    check_nearest_at(kBf16, bf16_nearest, f32(static_cast<std::uint32_t>(u)));
  for (std::uint32_t h = 0; h < 0x7f7f; h += 7) {  // midpoints between bf16 neighbours: ties to even
    const float mid = static_cast<float>(
        (ref_bf16_value(static_cast<std::uint16_t>(h)) + ref_bf16_value(static_cast<std::uint16_t>(h + 1))) /
        2);
    check_nearest_at(kBf16, bf16_nearest, mid);
    check_nearest_at(kBf16, bf16_nearest, -mid);
  }
}

// --------------------------------- stochastic FP16 ---------------------------------

namespace {
std::uint32_t rng_word(std::uint64_t seed, std::uint64_t i) {
  const mpe::num::RowRng rng{seed, i / 100, static_cast<std::uint32_t>(i % 100),
                             mpe::num::RoundingSite::StoreUpdate};
  return rng.draw(0).x;
}
}  // namespace

TEST_CASE(
    "float_to_half<Stochastic>: result is a neighbour, unbiased over 20000 counters (normal and subnormal)") {
  // x = lo + f * (hi - lo) for f in {0.1, 0.5, 0.9}: 1.0's binade (ulp 2^-10 above 1), a
  // subnormal (2^-24 grid), and the smallest normal binade edge 2^-14.
  for (double base : {1.0, 0x1p-20, 0x1p-24 * 3, 0x1p-14 - 0x1p-24, -0.75}) {
    for (double f : {0.1, 0.5, 0.9}) {
      const double a = std::fabs(base);
      const std::uint16_t lo_bits = ref_floor_bits(kHalf, a);
      const double lo = ref_half_value(lo_bits), hi = ref_half_value(static_cast<std::uint16_t>(lo_bits + 1));
      const float x = static_cast<float>((base < 0 ? -1 : 1) * (lo + f * (hi - lo)));
      const double xf = std::fabs(static_cast<double>(x));
      const double p = (xf - lo) / (hi - lo);  // the exact fraction of the float x
      const int n = 20000;
      double sum = 0;
      for (int i = 0; i < n; ++i) {
        const float r = mpe::num::round_to_half<mpe::StochasticRounding>(x, rng_word(7, i));
        const double ar = std::fabs(static_cast<double>(r));
        REQUIRE((ar == lo || ar == hi));
        REQUIRE(std::signbit(r) == std::signbit(x));
        sum += ar;
      }
      const double mean = sum / n;
      // 4 standard errors of a two-point distribution; the rounding's own bias is < 2^-24 step
      const double se = (hi - lo) * std::sqrt(p * (1 - p) / n);
      INFO("base " << base << " f " << f << " mean " << mean << " x " << xf);
      CHECK(std::fabs(mean - xf) <= 4 * se + (hi - lo) * 0x1p-24);
    }
  }
}

TEST_CASE("float_to_half subnormals: both policies land on the 2^-24 grid correctly") {
  for (int k = 0; k < 4 * 1024 + 8;
       ++k) {  // x = k * 2^-26: quarter steps across all subnormals and a bit beyond
    const float x = std::ldexp(static_cast<float>(k), -26);
    check_nearest_at(kHalf, half_nearest, x);
    check_nearest_at(kHalf, half_nearest, -x);
    const double a = x;
    const double lo = ref_half_value(ref_floor_bits(kHalf, a));
    for (std::uint32_t w : {0u, 0x80000000u, 0xffffffffu, 0x3fffffffu}) {
      const double r = mpe::num::round_to_half<mpe::StochasticRounding>(x, w);
      const double hi = ref_half_value(static_cast<std::uint16_t>(ref_floor_bits(kHalf, a) + 1));
      REQUIRE((r == lo || (r == hi && a != lo)));
      // u = top 24 bits of w / 2^24; round up iff u < fraction (rounding.hpp)
      const double u = static_cast<double>(w >> 8) * 0x1p-24;
      const double frac = (a - lo) / (hi - lo);
      REQUIRE((r == hi) == (u < frac));
    }
  }
}

TEST_CASE("FP16 stochastic rounding keeps updates below half an ulp; nearest loses them") {
  // w = 1.0 minus 1e-4 a thousand times. Below 1.0 the FP16 ulp is 2^-11 ~ 4.9e-4, so
  // 1e-4 is ~0.2 ulp: nearest rounds every step back to 1.0; stochastic drifts to ~0.9.
  const int steps = 1000, seeds = 64;
  double sum = 0;
  std::vector<float> finals;
  for (int s = 0; s < seeds; ++s) {
    float w = 1.0f;
    for (int i = 0; i < steps; ++i) {
      const mpe::num::RowRng rng{static_cast<std::uint64_t>(s) + 1, 5, static_cast<std::uint32_t>(i),
                                 mpe::num::RoundingSite::StoreUpdate};
      w = mpe::num::round_to_half<mpe::StochasticRounding>(mpe::num::sub(w, 1e-4f), rng.draw(0).x);
    }
    finals.push_back(w);
    sum += w;
  }
  const double mean = sum / seeds;
  // Per step the rounding adds variance <= ulp^2/4 with ulp = 2^-11 (w stays in [0.5, 1)),
  // so one run has sd <= sqrt(1000)*2^-12 ~ 7.7e-3 and the mean of 64 runs sd <= 9.7e-4;
  // bound = 4 of those plus the float subtraction's rounding (<= 2^-25 per step, 1000 steps).
  const double bound = 4 * std::sqrt(steps * 0.25 * 0x1p-22 / seeds) + steps * 0x1p-25;
  INFO("mean " << mean << " bound " << bound);
  CHECK(std::fabs(mean - (1.0 - steps * 1e-4)) <= bound);
  CHECK(*std::min_element(finals.begin(), finals.end()) < *std::max_element(finals.begin(), finals.end()));

  float w = 1.0f;
  for (int i = 0; i < steps; ++i) w = mpe::num::round_to_half<mpe::NearestRounding>(mpe::num::sub(w, 1e-4f));
  CHECK(w == 1.0f);
}

TEST_CASE("RowRng: same seed and counter give the same bits; seeds, rows, steps, sites, groups differ") {
  const mpe::num::RowRng a{42, 7, 3, mpe::num::RoundingSite::WriteBack};
  const auto x = a.draw(5), y = a.draw(5);
  CHECK((x.x == y.x && x.y == y.y && x.z == y.z && x.w == y.w));
  auto differs = [&](const mpe::num::Uint4& u) {
    return u.x != x.x || u.y != x.y || u.z != x.z || u.w != x.w;
  };
  CHECK(differs(mpe::num::RowRng{43, 7, 3, mpe::num::RoundingSite::WriteBack}.draw(5)));
  CHECK(differs(mpe::num::RowRng{42, 8, 3, mpe::num::RoundingSite::WriteBack}.draw(5)));
  CHECK(differs(mpe::num::RowRng{42, 7, 4, mpe::num::RoundingSite::WriteBack}.draw(5)));
  CHECK(differs(mpe::num::RowRng{42, 7, 3, mpe::num::RoundingSite::Flush}.draw(5)));
  CHECK(differs(a.draw(6)));
  // the counter is exactly DESIGN.md's {row_lo, row_hi, step, site << 24 | group}
  const mpe::num::RowRng big{0x0123456789abcdefull, 0x1122334455667788ull, 9, mpe::num::RoundingSite::Init};
  const auto r = big.draw(0x31);
  const auto ref =
      mpe::num::philox4x32_10({0x55667788u, 0x11223344u, 9u, (5u << 24) | 0x31u}, 0x89abcdefu, 0x01234567u);
  CHECK((r.x == ref.x && r.y == ref.y && r.z == ref.z && r.w == ref.w));
}

// ------------------------------------ rint_even ------------------------------------

TEST_CASE("rint_even: ties to even, matches nearbyint (round-to-nearest mode) everywhere") {
  for (int k = -2000; k <= 2000; ++k) {
    const float t = static_cast<float>(k) + 0.5f;
    const float want =
        (k % 2 == 0) ? static_cast<float>(k) : static_cast<float>(k + 1);  // the even neighbour
    REQUIRE(mpe::num::rint_even(t) == want);
    REQUIRE(mpe::num::rint_even(static_cast<float>(k)) == static_cast<float>(k));
  }
  for (float x : {8388607.5f, -8388607.5f, 8388608.0f, 16777215.0f, 0.49999997f, 0.50000006f, -0.49999997f,
                  1.5f, 2.5f, -2.5f, 1e30f, -1e30f, 0x1p-149f}) {
    REQUIRE(mpe::num::rint_even(x) == std::nearbyint(x));
  }
  std::mt19937 gen(3);
  for (int i = 0; i < 200000; ++i) {
    const float x = f32(gen());
    if (!std::isfinite(x)) continue;
    REQUIRE(mpe::num::rint_even(x) == std::nearbyint(x));
  }
}

// ----------------------------------- pairwise_sum -----------------------------------

namespace {
/// The documented order, written independently: block sums of 8 left to right; blocks
/// combine like a binary counter, i.e. m blocks split into aligned power-of-two chunks
/// (the bits of m, largest first), each a balanced tree; the chunks are then added from
/// the smallest (rightmost) to the largest: P0 + (P1 + (... + Plast)).
float tree(const std::vector<float>& b, std::size_t lo, std::size_t cnt) {
  if (cnt == 1) return b[lo];
  const float l = tree(b, lo, cnt / 2);
  const float r = tree(b, lo + cnt / 2, cnt / 2);
  return l + r;
}

float documented_order_sum(const std::vector<float>& x) {
  if (x.empty()) return 0.0f;
  std::vector<float> blocks;
  for (std::size_t i = 0; i < x.size(); i += 8) {
    float s = x[i];
    for (std::size_t j = i + 1; j < std::min(x.size(), i + 8); ++j) s = s + x[j];
    blocks.push_back(s);
  }
  std::vector<float> parts;
  std::size_t pos = 0;
  for (int bit = 62; bit >= 0; --bit) {
    const std::size_t c = std::size_t{1} << bit;
    if (blocks.size() & c) {
      parts.push_back(tree(blocks, pos, c));
      pos += c;
    }
  }
  float s = parts.back();
  for (std::size_t k = parts.size() - 1; k-- > 0;) s = parts[k] + s;
  return s;
}
}  // namespace

TEST_CASE("pairwise_sum: close to the exact sum and bit-identical to the documented order") {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 12);
  int sequential_differs = 0;
  for (int n = 0; n <= 100; ++n) {
    for (int rep = 0; rep < 20; ++rep) {
      std::vector<float> x(static_cast<std::size_t>(n));
      for (auto& v : x) v = std::ldexp(mant(gen), ex(gen));  // wide magnitudes: order matters
      const float got =
          mpe::num::pairwise_sum(n, [&](std::int64_t i) { return x[static_cast<std::size_t>(i)]; });
      double exact = 0, abs_sum = 0;
      for (float v : x) {
        exact += v;  // double: each add errs by <= 2^-53 * sum|x|, negligible against the float bound
        abs_sum += std::fabs(v);
      }
      // A term passes through <= 7 adds in its block, <= log2(blocks) counter merges and
      // <= log2(blocks) + 1 final merges: depth k <= 8 + 2*ceil(log2(blocks + 1)); the
      // classic bound is |err| <= k*u/(1-k*u) * sum|x|, u = 2^-24.
      const int blocks = (n + 7) / 8;
      const double k = 8 + 2 * std::ceil(std::log2(blocks + 1.0));
      const double u = 0x1p-24;
      INFO("n = " << n);
      REQUIRE(std::fabs(static_cast<double>(got) - exact) <= k * u / (1 - k * u) * abs_sum);
      REQUIRE(same_bits_or_both_nan(got, documented_order_sum(x)));
      float seq = 0;
      for (float v : x) seq += v;
      if (std::memcmp(&seq, &got, 4) != 0) ++sequential_differs;
    }
  }
  // the bit-identity check above is only meaningful if the order is observable
  CHECK(sequential_differs > 100);
}

TEST_CASE("backward's branch-free row tests equal their per-element definitions") {
  // Every float whose top 16 bits take each of the 65,536 patterns (low bits 0, 1 and
  // 0xffff: both ends of each binade slice), as a row of 1 and inside longer rows.
  std::vector<float> all;
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    for (const std::uint32_t lo : {0u, 1u, 0xffffu}) all.push_back(mpe::num::bits_float(hi << 16 | lo));
  }
  std::size_t mismatches = 0;
  for (const float x : all) {
    mismatches += mpe::detail::all_finite(&x, 1) != mpe::num::is_finite(x);
    mismatches += mpe::detail::no_nan(&x, 1) != (x == x);
  }
  CHECK(mismatches == 0);
  // Rows of 7 finite values with one special value at each position.
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max(), 0.0f};
  for (const float sp : specials) {
    for (int at = 0; at < 7; ++at) {
      std::vector<float> row{1.0f, -2.0f, 3.5f, 0.0f, -0.0f, 1e30f, -1e-30f};
      row[static_cast<std::size_t>(at)] = sp;
      CHECK(mpe::detail::all_finite(row.data(), 7) == mpe::num::is_finite(sp));
      CHECK(mpe::detail::no_nan(row.data(), 7) == (sp == sp));
    }
  }
  // sub_within_limit against sanitize(w - up) per element, for each format's limit: pairs
  // of values from `all` (finite ones; backward's updates are never NaN) around the limit.
  for (const float limit :
       {mpe::Fp32::limit, mpe::Fp16::limit, mpe::Int8Rowwise::limit, mpe::Int4Rowwise::limit}) {
    CAPTURE(limit);
    std::size_t bad = 0;
    std::mt19937_64 rng(static_cast<std::uint64_t>(mpe::num::float_bits(limit)));
    for (int trial = 0; trial < 20000; ++trial) {
      constexpr int kD = 9;
      float w[kD], up[kD], expect[kD];
      bool expect_sat = false;
      for (int d = 0; d < kD; ++d) {
        // mostly ordinary values; some near or beyond the limit, some infinite updates
        const auto pick = rng() % 8;
        w[d] = pick == 0   ? limit
               : pick == 1 ? -limit
                           : static_cast<float>(static_cast<std::int64_t>(rng() % 2001) - 1000);
        const float far = std::ldexp(1.0f, static_cast<int>(rng() % 140));
        // pick 5: minus one ulp of the limit, so limit - up lands just past it
        const float ulp = std::nextafter(limit, std::numeric_limits<float>::infinity()) - limit;
        up[d] = pick == 2   ? -limit
                : pick == 3 ? far
                : pick == 4 ? -std::numeric_limits<float>::infinity()
                : pick == 5 ? -ulp
                            : static_cast<float>(static_cast<std::int64_t>(rng() % 21) - 10);
        expect[d] = mpe::detail::sanitize(mpe::num::sub(w[d], up[d]), limit, expect_sat);
      }
      const bool sat = mpe::detail::sub_within_limit(w, up, kD, limit);
      bad += sat != expect_sat;
      for (int d = 0; d < kD; ++d) bad += mpe::num::float_bits(w[d]) != mpe::num::float_bits(expect[d]);
    }
    CHECK(bad == 0);
  }
}
