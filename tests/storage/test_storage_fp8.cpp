// SPDX-License-Identifier: Apache-2.0
// FP8 row formats (storage/fp8_rowwise.hpp): Fp8E4M3Rowwise and Fp8E5M2Rowwise x rounding,
// against references written here from the OCP 8-bit floating point specification v1.0:
//  - the decoder against an independent decoder of the bit layout, for all 256 codes;
//  - the nearest encoder against a brute-force nearest search over all finite codes
//    (ties to the even code), stochastic against its two neighbours;
//  - rows: error within half an FP8 step of x / scale (nearest) or one step (stochastic),
//    times the scale, plus stated f32 slack; scale = max|x| / FP8_MAX; no NaN/Inf code;
//    unbiased stochastic rounding; saturation only for non-finite input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mpe/numeric/philox.hpp>
#include <mpe/storage/all.hpp>
#include <random>
#include <type_traits>
#include <vector>

#include "reference/storage_row.hpp"

namespace {

using ref::Combo;
using ref::dequant;
using ref::new_row;
using ref::quant;

#define MPE_FP8_COMBOS                                                                                   \
  Combo<mpe::Fp8E4M3Rowwise, mpe::NearestRounding>, Combo<mpe::Fp8E4M3Rowwise, mpe::StochasticRounding>, \
      Combo<mpe::Fp8E5M2Rowwise, mpe::NearestRounding>, Combo<mpe::Fp8E5M2Rowwise, mpe::StochasticRounding>

constexpr double kU = 0x1p-24;  // unit roundoff of binary32

// ---------------- independent reference (OCP FP8 v1.0, section 5.1 tables) ----------------

/// Parameters of the two formats as the spec tabulates them.
struct Spec {
  int ebits, mbits, bias;
  bool ieee_specials;  // E5M2: exponent all ones = Inf/NaN; E4M3: only S.1111.111 is NaN
  double max_normal, min_subnormal;
};
template <class S>
Spec spec() {
  if constexpr (std::is_same_v<S, mpe::Fp8E4M3Rowwise>) return {4, 3, 7, false, 448.0, std::ldexp(1.0, -9)};
  return {5, 2, 15, true, 57344.0, std::ldexp(1.0, -16)};
}

/// Decodes code c from the bit layout (double arithmetic, no shared code with mpe).
template <class S>
double ref_decode_code(int c) {
  const Spec sp = spec<S>();
  const int s = (c >> 7) & 1;
  const int e = (c >> sp.mbits) & ((1 << sp.ebits) - 1);
  const int m = c & ((1 << sp.mbits) - 1);
  const int emax_field = (1 << sp.ebits) - 1;
  double v;
  if (sp.ieee_specials && e == emax_field) {
    v = m == 0 ? INFINITY : NAN;
  } else if (!sp.ieee_specials && e == emax_field && m == (1 << sp.mbits) - 1) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - sp.bias - sp.mbits);
  } else {
    v = std::ldexp(1.0 + m / static_cast<double>(1 << sp.mbits), e - sp.bias);
  }
  return s ? -v : v;
}

template <class S>
bool is_special_code(int c) {
  return !std::isfinite(ref_decode_code<S>(c));
}

/// Brute force: the finite code nearest to v (magnitude codes of v's sign), ties to the
/// code with an even last bit. Values beyond the range map to the largest finite code.
template <class S>
int ref_nearest_code(double v) {
  const int sign = std::signbit(v) ? 0x80 : 0;
  const double a = std::fabs(v);
  int best = -1;
  double best_err = INFINITY;
  for (int c = 0; c < 128; ++c) {
    if (is_special_code<S>(c)) continue;
    const double err = std::fabs(ref_decode_code<S>(c) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | best;
}

/// The two finite FP8 magnitudes around a (a >= 0, at most the max): largest <= a, smallest >= a.
template <class S>
void ref_neighbours(double a, double& lo, double& hi) {
  lo = 0;
  hi = INFINITY;
  for (int c = 0; c < 128; ++c) {
    if (is_special_code<S>(c)) continue;
    const double x = ref_decode_code<S>(c);
    if (x <= a && x > lo) lo = x;
    if (x >= a && x < hi) hi = x;
  }
}

/// The FP8 spacing around magnitude a (the gap between its two neighbours on the grid).
template <class S>
double fp8_step(double a) {
  const Spec sp = spec<S>();
  int e = a == 0 ? 1 - sp.bias : std::ilogb(a);
  if (e < 1 - sp.bias) e = 1 - sp.bias;
  return std::ldexp(1.0, e - sp.mbits);
}

float f32le(const std::uint8_t* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                          (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

/// Element d per the documented layout: D codes, then the f32 scale; x = scale * value
/// (one f32 multiplication).
template <class S>
float ref_decode(const std::uint8_t* row, int D, int d) {
  return f32le(row + D) * static_cast<float>(ref_decode_code<S>(row[d]));
}

double sanitized(float x) {
  if (std::isnan(x)) return 0.0;
  return std::clamp(static_cast<double>(x), -static_cast<double>(FLT_MAX), static_cast<double>(FLT_MAX));
}

/// Stores x and checks: Reader == independent decoder (bitwise); no NaN/Inf code; the
/// scale follows the documented rule; every element within the error bound of the
/// sanitized input; only data_bytes written. Returns store()'s result.
template <class S, class R>
bool store_and_check(const std::vector<float>& x, const mpe::num::RowRng& rng) {
  const int D = static_cast<int>(x.size());
  const double fmax = spec<S>().max_normal;
  auto row = new_row<S>(D);
  const bool sat = quant<S, R>(x, row, rng);
  std::vector<double> xs(x.size());
  double amax = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    xs[i] = sanitized(x[i]);
    amax = std::max(amax, std::fabs(xs[i]));
  }
  const double scale = f32le(row.data() + D);
  INFO("D = " << D << " amax " << amax << " scale " << scale);
  REQUIRE(std::isfinite(scale));
  REQUIRE(scale >= 0);
  if (amax == 0) {
    REQUIRE(scale == 0.0);
    for (int d = 0; d < D; ++d) REQUIRE(row[static_cast<std::size_t>(d)] == 0);
  } else {
    // scale = amax / FP8_MAX rounded once to f32; floored at 2^-149; or the f32 just below
    // when scale * FP8_MAX would overflow f32
    const double want = amax / fmax;
    if (want < 0x1p-149) {
      REQUIRE(scale == 0x1p-149);
    } else if (std::fabs(scale - want) > std::max(kU * want, 0x1p-150)) {
      // stepped down: the f32 above would read the top code back as Inf
      const float up = std::nextafter(static_cast<float>(scale), INFINITY);
      REQUIRE(std::isinf(up * static_cast<float>(fmax)));
      REQUIRE(scale < want);
      REQUIRE(want - scale <= 3 * kU * want);
    }
    REQUIRE(static_cast<float>(scale) * static_cast<float>(fmax) <= FLT_MAX);  // top code reads back finite
  }
  const auto got = dequant<S>(row, D);
  for (int d = 0; d < D; ++d) {
    const std::uint8_t c = row[static_cast<std::size_t>(d)];
    const float ref = ref_decode<S>(row.data(), D, d);
    const float g = got[static_cast<std::size_t>(d)];
    const double xd = xs[static_cast<std::size_t>(d)];
    INFO("d = " << d << ", x = " << x[static_cast<std::size_t>(d)] << ", code " << int(c) << ", got " << g);
    REQUIRE_FALSE(is_special_code<S>(c));  // never NaN (E4M3 S.1111.111) or Inf/NaN (E5M2)
    REQUIRE(std::memcmp(&ref, &g, 4) == 0);
    REQUIRE(std::isfinite(g));
    REQUIRE(std::fabs(g) <= S::limit);
    if (scale == 0) continue;
    // Bound: the FP8 rounding of v = x / scale (half a step nearest, one step stochastic),
    // times the scale; slack for the f32 roundings of x / scale and scale * code (2^-24
    // relative each, 8 ulps of margin), the clamp of v to FP8_MAX (v above it by an f32
    // rounding of v or of the scale: 4 ulps of the top value) and a subnormal scale
    // (absolute 2^-150 per unit of FP8_MAX, plus 2^-149 for the product).
    const double v = std::fabs(xd) / scale;
    const double step = fp8_step<S>(std::min(v, fmax));
    const double bound = (R::stochastic ? step : step / 2) * scale + 8 * kU * std::fabs(xd) +
                         4 * kU * fmax * scale + (scale < 0x1p-126 ? fmax * 0x1p-150 + 0x1p-149 : 0.0);
    REQUIRE(std::fabs(static_cast<double>(g) - xd) <= bound);
  }
  for (std::size_t i = S::data_bytes(D); i < row.size(); ++i) REQUIRE(row[i] == 0xAB);
  return sat;
}

std::vector<float> random_row(std::mt19937& gen, int D, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(static_cast<std::size_t>(D));
  for (auto& v : x) v = u(gen);
  return x;
}

const int kDims[] = {1, 2, 3, 7, 16, 33, 100, 1024};

}  // namespace

TEST_CASE_TEMPLATE("fp8: decoding all 256 codes equals the OCP bit-layout decoder", S, mpe::Fp8E4M3Rowwise,
                   mpe::Fp8E5M2Rowwise) {
  using F = typename S::format;
  int nan = 0, inf = 0;
  for (int c = 0; c < 256; ++c) {
    const float got = mpe::num::fp8_to_float<F>(static_cast<std::uint8_t>(c));
    const double want = ref_decode_code<S>(c);
    INFO("code " << c << " got " << got << " want " << want);
    if (std::isnan(want)) {
      ++nan;
      CHECK(std::isnan(got));
    } else {
      inf += std::isinf(want);
      CHECK(static_cast<double>(got) == want);
      CHECK(std::signbit(got) == ((c & 0x80) != 0));  // signed zeros too
    }
  }
  const Spec sp = spec<S>();
  // the spec's tabulated counts and extremes
  CHECK(nan == (sp.ieee_specials ? 6 : 2));
  CHECK(inf == (sp.ieee_specials ? 2 : 0));
  CHECK(static_cast<double>(mpe::num::fp8_to_float<F>(F::max_code)) == sp.max_normal);
  CHECK(static_cast<double>(F::max) == sp.max_normal);
  CHECK(static_cast<double>(mpe::num::fp8_to_float<F>(1)) == sp.min_subnormal);
  // the encoder inverts the decoder on every finite code
  for (int c = 0; c < 256; ++c) {
    if (is_special_code<S>(c)) continue;
    const float v = mpe::num::fp8_to_float<F>(static_cast<std::uint8_t>(c));
    const auto r = mpe::num::float_to_fp8<F, mpe::NearestRounding>(v);
    CHECK(int(r.bits) == c);
    CHECK_FALSE(r.saturated);
    for (std::uint32_t w : {0u, 0x7fffffffu, 0xffffffffu}) {
      CHECK(int(mpe::num::float_to_fp8<F, mpe::StochasticRounding>(v, w).bits) == c);
    }
  }
}

TEST_CASE_TEMPLATE("fp8: nearest encoding equals a brute-force nearest search (ties to even)", S,
                   mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise) {
  using F = typename S::format;
  std::vector<float> probes;
  // every finite code's value, the midpoints between neighbours (ties) and points just
  // beside them, beyond the top, and random values across the whole range
  std::vector<double> mags;
  for (int c = 0; c < 128; ++c)
    if (!is_special_code<S>(c)) mags.push_back(ref_decode_code<S>(c));
  std::sort(mags.begin(), mags.end());
  const double step_top = mags.back() - mags[mags.size() - 2];
  mags.push_back(mags.back() + step_top);  // the first value past the top (rounds back to it)
  for (std::size_t i = 0; i + 1 < mags.size(); ++i) {
    const float a = static_cast<float>(mags[i]), mid = static_cast<float>((mags[i] + mags[i + 1]) / 2);
    for (float p : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    static_cast<float>(mags[i] + (mags[i + 1] - mags[i]) * 0.3)}) {
      probes.push_back(p);
      probes.push_back(-p);
    }
  }
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> ex(-24.0f, 18.0f);
  for (int i = 0; i < 20000; ++i) {
    const float p = std::exp2(ex(gen));
    probes.push_back(gen() % 2 ? p : -p);
  }
  int checked = 0;
  for (float p : probes) {
    const auto r = mpe::num::float_to_fp8<F, mpe::NearestRounding>(p);
    const int want = ref_nearest_code<S>(p);
    INFO("v = " << p);
    REQUIRE(int(r.bits) == want);
    // saturated exactly when the nearest-even result on the unbounded grid lies past the
    // top: beyond max + step/2, or at that tie when the top code is odd (E5M2's 0x7B; the
    // tie goes up, to IEEE's Inf; E4M3's top 0x7E is even and keeps it)
    const double tie = static_cast<double>(F::max) + step_top / 2, a = std::fabs(p);
    CHECK(r.saturated == (a > tie || (a == tie && (F::max_code & 1) != 0)));
    ++checked;
  }
  MESSAGE(checked << " values checked against the brute-force search");
  CHECK(checked > 20000);
}

TEST_CASE_TEMPLATE("fp8: stochastic encoding picks one of the two neighbours, unbiased", S,
                   mpe::Fp8E4M3Rowwise, mpe::Fp8E5M2Rowwise) {
  using F = typename S::format;
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> ex(-20.0f, std::log2(static_cast<float>(F::max)));
  for (int i = 0; i < 200; ++i) {
    const float p = std::exp2(ex(gen)) * (i % 2 ? -1.0f : 1.0f);
    double lo, hi;
    ref_neighbours<S>(std::fabs(p), lo, hi);
    const int n = 4000;
    double sum = 0;
    for (int k = 0; k < n; ++k) {
      const auto r = mpe::num::float_to_fp8<F, mpe::StochasticRounding>(p, static_cast<std::uint32_t>(gen()));
      const double v = std::fabs(ref_decode_code<S>(r.bits));
      REQUIRE((v == lo || v == hi));
      REQUIRE(std::signbit(ref_decode_code<S>(r.bits)) == std::signbit(p));
      sum += v;
    }
    const double a = std::fabs(p), pr = hi == lo ? 0 : (a - lo) / (hi - lo);
    const double se = (hi - lo) * std::sqrt(pr * (1 - pr) / n);
    INFO("v = " << p << " lo " << lo << " hi " << hi << " mean " << sum / n);
    CHECK(std::fabs(sum / n - a) <= 5 * se + (hi - lo) * 0x1p-20);
  }
}

TEST_CASE_TEMPLATE("fp8 store/Reader: random rows within the rounding bound for every D", C, MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  std::mt19937 gen(1);
  for (int D : kDims) {
    for (int rep = 0; rep < 5; ++rep) {
      const float span =
          rep == 0 ? 1.0f : (rep == 1 ? 100.0f : (rep == 2 ? 1e-3f : (rep == 3 ? 1e30f : 1e-30f)));
      const auto x = random_row(gen, D, -span, rep == 2 ? 3 * span : span);
      const mpe::num::RowRng rng{99, static_cast<std::uint64_t>(D * 10 + rep), 3,
                                 mpe::num::RoundingSite::StoreUpdate};
      CHECK_FALSE(store_and_check<S, R>(x, rng));
    }
    // wide dynamic range inside one row: small elements reach FP8 subnormals and zero
    std::vector<float> wide(static_cast<std::size_t>(D));
    std::uniform_real_distribution<float> ex(-30.0f, 10.0f);
    for (auto& v : wide) v = std::exp2(ex(gen)) * (gen() % 2 ? 1.0f : -1.0f);
    CHECK_FALSE(
        store_and_check<S, R>(wide, {4, static_cast<std::uint64_t>(D), 0, mpe::num::RoundingSite::Init}));
  }
}

TEST_CASE_TEMPLATE("fp8 store/Reader: zero, constant, one-outlier, near-constant and tiny rows", C,
                   MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  using F = typename S::format;
  const mpe::num::RowRng rng{5, 1, 0, mpe::num::RoundingSite::SetWeights};
  for (int D : kDims) {
    for (float c : {0.0f, -0.0f, 1.0f, -0.3f, 0.1f, 1234.567f, 3e-6f}) {
      const std::vector<float> x(static_cast<std::size_t>(D), c);
      CHECK_FALSE(store_and_check<S, R>(x, rng));
      // a constant row maps onto the top code: exact up to the f32 roundings of the scale
      auto row = new_row<S>(D);
      quant<S, R>(x, row, rng);
      for (float v : dequant<S>(row, D)) REQUIRE(std::fabs(v - c) <= 4 * kU * std::fabs(c));
      if (c != 0.0f) {
        for (int d = 0; d < D; ++d) REQUIRE((row[static_cast<std::size_t>(d)] & 0x7f) == F::max_code);
      }
    }
    std::vector<float> outlier(static_cast<std::size_t>(D), 0.25f);
    outlier[static_cast<std::size_t>(D / 2)] = 50.0f;
    CHECK_FALSE(store_and_check<S, R>(outlier, rng));
    outlier[static_cast<std::size_t>(D / 2)] = -5e4f;  // 0.25 falls into E4M3's subnormals
    CHECK_FALSE(store_and_check<S, R>(outlier, rng));
    std::vector<float> near(static_cast<std::size_t>(D));
    for (int d = 0; d < D; ++d)
      near[static_cast<std::size_t>(d)] = 0.01f + 1e-7f * static_cast<float>(d % 5) / 4;
    CHECK_FALSE(store_and_check<S, R>(near, rng));
    // subnormal f32 inputs: the scale underflows to (or below) the smallest subnormal
    std::vector<float> tiny(static_cast<std::size_t>(D));
    for (float base : {0x1p-149f, 0x1p-140f, 0x1p-135f, 0x1p-127f, 0x1p-120f}) {
      for (int d = 0; d < D; ++d) tiny[static_cast<std::size_t>(d)] = base * static_cast<float>(d % 3 + 1);
      CHECK_FALSE(store_and_check<S, R>(tiny, rng));
    }
  }
}

TEST_CASE_TEMPLATE("fp8 store: non-finite values are found and saturate; FLT_MAX is held", C,
                   MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  const mpe::num::RowRng rng{8, 2, 0, mpe::num::RoundingSite::StoreUpdate};
  CHECK(S::limit == FLT_MAX);
  const std::vector<float> bad = {std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  -std::numeric_limits<float>::infinity()};
  for (int D : {1, 3, 7, 33}) {
    std::mt19937 gen(static_cast<unsigned>(D));
    for (float b : bad) {
      auto x = random_row(gen, D, -2.0f, 2.0f);
      CHECK(S::find_unrepresentable(x.data(), D) == -1);
      const int at = D / 2;
      x[static_cast<std::size_t>(at)] = b;
      INFO("D = " << D << " bad = " << b);
      CHECK(S::find_unrepresentable(x.data(), D) == at);
      CHECK(store_and_check<S, R>(x, rng));  // saturated, finite, within bound of the clamped row
    }
    // the largest floats are representable: nothing saturates, the row reads back finite
    // (the scale steps down when FLT_MAX / FP8_MAX * FP8_MAX would round up to Inf)
    for (float lim : {FLT_MAX, -FLT_MAX, 0x1p127f, std::nextafter(FLT_MAX, 0.0f)}) {
      for (std::uint32_t k = 0; k < 16; ++k) {
        auto x = random_row(gen, D, -2.0f, 2.0f);
        x[0] = lim;
        if (D > 2) x[2] = -lim / 3;
        CHECK(S::find_unrepresentable(x.data(), D) == -1);
        CHECK_FALSE(store_and_check<S, R>(x, {31, k, 0, mpe::num::RoundingSite::StoreUpdate}));
      }
    }
  }
}

TEST_CASE_TEMPLATE("fp8 store: rounding between two grid points (unbiased stochastic, ties-to-even nearest)",
                   C, MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  using F = typename S::format;
  // hi = FP8_MAX makes the scale exactly 1; element 1 lies between 1 and 1 + step
  const double step = std::ldexp(1.0, -spec<S>().mbits);
  for (double f : {0.1, 0.5, 0.9}) {
    const float x = static_cast<float>(1.0 + f * step);
    const std::vector<float> row_in = {0.5f, x, F::max};
    const int n = 20000;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const mpe::num::RowRng rng{2024, static_cast<std::uint64_t>(i / 100),
                                 static_cast<std::uint32_t>(i % 100), mpe::num::RoundingSite::StoreUpdate};
      auto row = new_row<S>(3);
      quant<S, R>(row_in, row, rng);
      REQUIRE(f32le(row.data() + 3) == 1.0f);
      const auto back = dequant<S>(row, 3);
      REQUIRE(back[2] == F::max);
      REQUIRE(back[0] == 0.5f);
      const double v = back[1];
      REQUIRE((v == 1.0 || v == 1.0 + step));
      sum += v;
      if (!R::stochastic) REQUIRE((v != 1.0) == (f > 0.5));  // the tie goes to 1.0 (even code)
    }
    if constexpr (R::stochastic) {
      const double se = step * std::sqrt(f * (1 - f) / n);
      INFO("f = " << f << " mean " << sum / n);
      CHECK(std::fabs(sum / n - x) <= 4 * se + step * 0x1p-24);
    }
  }
}

TEST_CASE_TEMPLATE("fp8 store: the row maximum never rounds past the top code (no NaN code)", C,
                   MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  using F = typename S::format;
  // Rows whose maximum gives v = amax / scale > FP8_MAX in f32: stochastic rounding would
  // move it to the next binade (E4M3: 480 = S.1111.111, the NaN code; E5M2: Inf) unless clamped.
  std::mt19937 gen(12);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  int found = 0;
  for (int t = 0; t < 100000 && found < 40; ++t) {
    const float amax = u(gen);
    const float scale = amax / F::max;
    if (!(amax / scale > F::max)) continue;
    ++found;
    const std::vector<float> x = {-amax, amax, amax / 2};
    for (std::uint32_t i = 0; i < 256; ++i) {
      auto row = new_row<S>(3);
      quant<S, R>(x, row, {3, static_cast<std::uint64_t>(t), i, mpe::num::RoundingSite::StoreUpdate});
      REQUIRE(int(row[0]) == (0x80 | F::max_code));
      REQUIRE(int(row[1]) == F::max_code);
    }
  }
  INFO("rows with amax / scale > FP8_MAX found: " << found);
  REQUIRE(found > 0);
}

TEST_CASE_TEMPLATE("fp8 store: same seed and counter give the same bytes; stochastic seeds differ", C,
                   MPE_FP8_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  std::mt19937 gen(4);
  const auto x = random_row(gen, 64, -1.0f, 1.0f);
  auto a = new_row<S>(64), b = new_row<S>(64), c = new_row<S>(64);
  quant<S, R>(x, a, {1, 10, 2, mpe::num::RoundingSite::WriteBack});
  quant<S, R>(x, b, {1, 10, 2, mpe::num::RoundingSite::WriteBack});
  quant<S, R>(x, c, {2, 10, 2, mpe::num::RoundingSite::WriteBack});
  CHECK(a == b);
  CHECK((a != c) == R::stochastic);
}

TEST_CASE("fp8: layout and names") {
  static_assert(mpe::StoragePolicy<mpe::Fp8E4M3Rowwise> && mpe::StoragePolicy<mpe::Fp8E5M2Rowwise>);
  CHECK(mpe::Fp8E4M3Rowwise::data_bytes(64) == 68);
  CHECK(mpe::Fp8E5M2Rowwise::data_bytes(16) == 20);
  CHECK(mpe::row_bytes<mpe::Fp8E4M3Rowwise>(7, 4) == 12);
  CHECK(std::string(mpe::Fp8E4M3Rowwise::name) == "fp8_e4m3_rowwise");
  CHECK(std::string(mpe::Fp8E5M2Rowwise::name) == "fp8_e5m2_rowwise");
  CHECK(mpe::Fp8E4M3Rowwise::bits == 8);
}
