// SPDX-License-Identifier: Apache-2.0
// Row formats (storage/): every Storage x Rounding against exact reference arithmetic
// written here from the published layouts and formulas (DESIGN.md "Formats").
#include <doctest/doctest.h>

#include <algorithm>
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

#define MPE_ALL_COMBOS                                                                                 \
  Combo<mpe::Fp32, mpe::NearestRounding>, Combo<mpe::Fp32, mpe::StochasticRounding>,                   \
      Combo<mpe::Fp16, mpe::NearestRounding>, Combo<mpe::Fp16, mpe::StochasticRounding>,               \
      Combo<mpe::Bf16, mpe::NearestRounding>, Combo<mpe::Bf16, mpe::StochasticRounding>,               \
      Combo<mpe::Int8Rowwise, mpe::NearestRounding>, Combo<mpe::Int8Rowwise, mpe::StochasticRounding>, \
      Combo<mpe::Int4Rowwise, mpe::NearestRounding>, Combo<mpe::Int4Rowwise, mpe::StochasticRounding>, \
      Combo<mpe::Int2Rowwise, mpe::NearestRounding>, Combo<mpe::Int2Rowwise, mpe::StochasticRounding>

constexpr double kU = 0x1p-24;  // unit roundoff of binary32

// ---------------- independent decoders (from the published byte layouts) ----------------

double ref_half(std::uint16_t h) {  // IEEE binary16
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                    : (e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1.0 + m / 1024.0, e - 15));
  return s ? -v : v;
}

std::uint16_t u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}  // little-endian
float f32le(const std::uint8_t* p) {
  const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
                          (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct QParams {
  double scale, bias;
};

/// The row-wise integer formats (min/max scale and bias).
template <class S>
constexpr bool is_int_rowwise = std::is_same_v<S, mpe::Int8Rowwise> || std::is_same_v<S, mpe::Int4Rowwise> ||
                                std::is_same_v<S, mpe::Int2Rowwise>;
/// Top code: 2^bits - 1.
template <class S>
constexpr int kQmax = std::is_same_v<S, mpe::Int8Rowwise> ? 255
                                                          : (std::is_same_v<S, mpe::Int4Rowwise> ? 15 : 3);

/// Scale and bias of a quantized row, read from the layout (Int8: f32 after D codes; Int4:
/// f16 after ceil(D/2) code bytes; Int2: f16 after ceil(D/4) code bytes).
template <class S>
QParams ref_qparams(const std::uint8_t* row, int D) {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    return {f32le(row + D), f32le(row + D + 4)};
  } else {
    const int nb = std::is_same_v<S, mpe::Int4Rowwise> ? (D + 1) / 2 : (D + 3) / 4;
    return {ref_half(u16(row + nb)), ref_half(u16(row + nb + 2))};
  }
}

/// Code of element d (FBGEMM's fused N-bit packing: column c in byte c / (8/N), shifted
/// left by (c % (8/N)) * N).
template <class S>
int ref_code(const std::uint8_t* row, int d) {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    return row[d];
  } else if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) {
    return (row[d / 2] >> (4 * (d % 2))) & 15;
  } else {
    return (row[d / 4] >> (2 * (d % 4))) & 3;
  }
}

/// Element d of a row per the published layout and x = scale * q + bias (FP32 mul then add,
/// DESIGN.md's dequantization formula).
template <class S>
float ref_decode(const std::uint8_t* row, int D, int d) {
  if constexpr (std::is_same_v<S, mpe::Fp32>) {
    return f32le(row + 4 * d);
  } else if constexpr (std::is_same_v<S, mpe::Fp16>) {
    return static_cast<float>(ref_half(u16(row + 2 * d)));
  } else if constexpr (std::is_same_v<S, mpe::Bf16>) {
    const std::uint32_t u = static_cast<std::uint32_t>(u16(row + 2 * d)) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  } else {
    const QParams qp = ref_qparams<S>(row, D);
    const float prod = static_cast<float>(qp.scale) * static_cast<float>(ref_code<S>(row, d));
    return prod + static_cast<float>(qp.bias);
  }
}

/// The spacing of a binary format with `mant` stored bits and minimum normal exponent
/// `emin` around |x| (the gap between x's two neighbours on the grid).
double grid_ulp(double x, int mant, int emin) {
  if (x == 0) return std::ldexp(1.0, emin - mant);
  int e = std::ilogb(x);
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - mant);
}

/// Largest FP16 value <= a (a finite, |a| <= 65504), by scanning the monotone patterns.
double half_round_down(double a) {
  double best = -65504;
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {
    for (double v : {ref_half(static_cast<std::uint16_t>(h)), -ref_half(static_cast<std::uint16_t>(h))}) {
      if (v <= a && v > best) best = v;
    }
  }
  return best;
}

/// What a format does to an input it cannot hold (documented): NaN -> 0, clamp to +-limit.
template <class S>
double sanitized(float x) {
  if (std::isnan(x)) return 0.0;
  return std::clamp(static_cast<double>(x), -static_cast<double>(S::limit), static_cast<double>(S::limit));
}

/// The largest |x - dequant(quant(x))| the format's published formula allows for element d
/// of the (sanitized) row xs, given the row's stored parameters (checked separately).
template <class S, class R>
double allowed_error(const std::vector<double>& xs, int d, const std::uint8_t* row, int D) {
  const bool st = R::stochastic;
  const double x = xs[static_cast<std::size_t>(d)];
  if constexpr (std::is_same_v<S, mpe::Fp32>) {
    return 0.0;  // a copy
  } else if constexpr (std::is_same_v<S, mpe::Fp16> || std::is_same_v<S, mpe::Bf16>) {
    // nearest: half the spacing at x; stochastic: one spacing (the other neighbour)
    const double ulp =
        std::is_same_v<S, mpe::Fp16> ? grid_ulp(std::fabs(x), 10, -14) : grid_ulp(std::fabs(x), 7, -126);
    return st ? ulp : ulp / 2;
  } else {
    const double mn = *std::min_element(xs.begin(), xs.end()), mx = *std::max_element(xs.begin(), xs.end());
    const QParams qp = ref_qparams<S>(row, D);
    const int qmax = kQmax<S>;
    if (mn == mx) {
      // constant row: exact for Int8 (f32 bias); Int4's and Int2's f16 bias is the nearest FP16
      return std::is_same_v<S, mpe::Int8Rowwise> ? 0.0 : grid_ulp(std::fabs(x), 10, -14) / 2;
    }
    // The step is the stored scale (checked against (max - min) / qmax elsewhere). Slack
    // for float rounding: (x - bias) and its product with 1/scale, scale*q and + bias each
    // round once (<= 2^-24 relative of values <= max(|x|, |bias|, qmax*scale)); 1/scale
    // rounds once (q off by <= qmax*2^-24 steps); 16 ulps covers them with margin.
    // Subnormal scales (tiny ranges) add absolute errors of 2^-150 per operation.
    const double big =
        std::max({std::fabs(x), std::fabs(qp.bias), qmax * qp.scale, std::fabs(mn), std::fabs(mx)});
    const double slack = 16 * kU * big + 4 * qmax * 0x1p-149;
    return (st ? qp.scale : qp.scale / 2) + slack;
  }
}

/// Stores x, then checks: Reader == independent decoder (bitwise); every element within
/// allowed_error of the sanitized input; the quantization parameters follow the published
/// formulas; codes never wrap. Returns store()'s result.
template <class S, class R>
bool store_and_check(const std::vector<float>& x, const mpe::num::RowRng& rng) {
  const int D = static_cast<int>(x.size());
  auto row = new_row<S>(D);
  const bool sat = quant<S, R>(x, row, rng);
  std::vector<double> xs(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xs[i] = sanitized<S>(x[i]);
  const auto got = dequant<S>(row, D);
  for (int d = 0; d < D; ++d) {
    const float ref = ref_decode<S>(row.data(), D, d);
    const float g = got[static_cast<std::size_t>(d)];
    INFO("D = " << D << ", d = " << d << ", x = " << x[static_cast<std::size_t>(d)] << ", got " << g);
    REQUIRE(std::memcmp(&ref, &g, 4) == 0);
    REQUIRE(std::isfinite(g));
    REQUIRE(std::fabs(g) <= S::limit);  // every stored row reads back inside the format's range
    REQUIRE(std::fabs(static_cast<double>(g) - xs[static_cast<std::size_t>(d)]) <=
            allowed_error<S, R>(xs, d, row.data(), D));
  }
  if constexpr (is_int_rowwise<S>) {
    const double mn = *std::min_element(xs.begin(), xs.end()), mx = *std::max_element(xs.begin(), xs.end());
    const QParams qp = ref_qparams<S>(row.data(), D);
    const int qmax = kQmax<S>;
    INFO("D = " << D << " min " << mn << " max " << mx << " scale " << qp.scale << " bias " << qp.bias);
    if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
      // bias = min exactly; scale = (max - min) / 255 up to two f32 roundings (sub, div), or 0
      // for a constant row
      REQUIRE(qp.bias == mn);
      const double want = (mx - mn) / qmax;
      REQUIRE(std::fabs(qp.scale - want) <= 2.5 * kU * want + 0x1p-149);
    } else if (mn == mx) {
      REQUIRE(qp.scale == 0.0);
    } else {
      // bias = min rounded down to FP16; scale = (max - bias)/qmax rounded up to FP16: the
      // smallest FP16 >= the f32 quotient (itself within 2 f32 roundings of the exact one)
      REQUIRE(qp.bias == half_round_down(mn));
      const double want = (mx - qp.bias) / qmax;
      const double below = half_round_down(std::nextafter(qp.scale, 0.0));  // next FP16 below the scale
      if (qp.scale < want * (1 - 2.5 * kU)) {
        // the FP16 just below the rounded-up scale, taken only because the rounded-up one
        // would read the top code back above 65504
        const double up = -half_round_down(-std::nextafter(qp.scale, 1e9));  // next FP16 above
        REQUIRE(up >= want * (1 - 2.5 * kU));
        REQUIRE(qp.bias + qmax * up > 65504.0);
        REQUIRE(qp.bias + qmax * qp.scale <= 65504.0);
      } else {
        REQUIRE(below < want * (1 + 2.5 * kU));
      }
    }
    if (mn == mx) {
      REQUIRE(qp.scale == 0.0);
      for (int d = 0; d < D; ++d) REQUIRE(ref_code<S>(row.data(), d) == 0);
    }
    if constexpr (!std::is_same_v<S, mpe::Int8Rowwise>) {
      // the unused high code bits of the last byte (D not a multiple of 8 / N) are 0
      const int per_byte = std::is_same_v<S, mpe::Int4Rowwise> ? 2 : 4;
      if (D % per_byte != 0)
        REQUIRE((row[static_cast<std::size_t>(D / per_byte)] >> (8 / per_byte * (D % per_byte))) == 0);
    }
  }
  for (std::size_t i = S::data_bytes(D); i < row.size(); ++i) {
    REQUIRE(row[i] == 0xAB);  // store() writes only its data_bytes
  }
  return sat;
}

std::vector<float> random_row(std::mt19937& gen, int D, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(static_cast<std::size_t>(D));
  for (auto& v : x) v = u(gen);
  return x;
}

const int kDims[] = {1, 2, 3, 7, 16, 33, 100, 1024, 4096};

}  // namespace

TEST_CASE_TEMPLATE("store/Reader: random rows within the format's rounding bound for every D", C,
                   MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  std::mt19937 gen(1);
  for (int D : kDims) {
    for (int rep = 0; rep < 3; ++rep) {
      const float span = rep == 0 ? 1.0f : (rep == 1 ? 100.0f : 1e-3f);
      const auto x = random_row(gen, D, -span, rep == 2 ? 3 * span : span);
      const mpe::num::RowRng rng{99, static_cast<std::uint64_t>(D * 10 + rep), 3,
                                 mpe::num::RoundingSite::StoreUpdate};
      CHECK_FALSE(store_and_check<S, R>(x, rng));
    }
  }
}

TEST_CASE_TEMPLATE("store/Reader: constant, one-outlier and near-constant rows", C, MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  const mpe::num::RowRng rng{5, 1, 0, mpe::num::RoundingSite::SetWeights};
  for (int D : kDims) {
    for (float c : {0.0f, 1.0f, -0.3f, 0.1f, 1234.567f, 3e-6f}) {
      const std::vector<float> x(static_cast<std::size_t>(D), c);
      CHECK_FALSE(store_and_check<S, R>(x, rng));  // includes: Fp32 and Int8 exact (allowed error 0)
      if constexpr (std::is_same_v<S, mpe::Fp32> || std::is_same_v<S, mpe::Int8Rowwise>) {
        auto row = new_row<S>(D);
        quant<S, R>(x, row, rng);
        for (float v : dequant<S>(row, D)) REQUIRE(v == c);
      }
    }
    std::vector<float> outlier(static_cast<std::size_t>(D), 0.25f);
    outlier[static_cast<std::size_t>(D / 2)] = 50.0f;
    CHECK_FALSE(store_and_check<S, R>(outlier, rng));
    outlier[static_cast<std::size_t>(D / 2)] = -50.0f;
    CHECK_FALSE(store_and_check<S, R>(outlier, rng));
    // near-constant: range 1e-7 around 0.01 (about 100 f32 ulps, far below an FP16 ulp)
    std::vector<float> near(static_cast<std::size_t>(D));
    for (int d = 0; d < D; ++d)
      near[static_cast<std::size_t>(d)] = 0.01f + 1e-7f * static_cast<float>(d % 5) / 4;
    CHECK_FALSE(store_and_check<S, R>(near, rng));
    // a range of a few subnormals (scale far below FLT_MIN)
    std::vector<float> tiny(static_cast<std::size_t>(D));
    for (int d = 0; d < D; ++d)
      tiny[static_cast<std::size_t>(d)] = 0x1p-140f + 0x1p-149f * static_cast<float>(d % 3);
    CHECK_FALSE(store_and_check<S, R>(tiny, rng));
    // a range of 2^-135: Int8's scale range/255 is subnormal but non-zero, 255/range overflows
    for (int d = 0; d < D; ++d)
      tiny[static_cast<std::size_t>(d)] = d % 3 == 0 ? 0.0f : (d % 3 == 1 ? 0x1p-135f : 0x1p-136f);
    CHECK_FALSE(store_and_check<S, R>(tiny, rng));
  }
}

TEST_CASE_TEMPLATE("store: unrepresentable values are found and saturate", C, MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  const mpe::num::RowRng rng{8, 2, 0, mpe::num::RoundingSite::StoreUpdate};
  std::vector<float> bad = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (float v : {1e6f, -1e6f, 1e30f, -1e30f, 0x1p127f, std::numeric_limits<float>::max()}) {
    if (std::fabs(v) > S::limit) bad.push_back(v);
  }
  if constexpr (std::is_same_v<S, mpe::Fp16> || std::is_same_v<S, mpe::Int4Rowwise> ||
                std::is_same_v<S, mpe::Int2Rowwise>) {
    CHECK(bad.size() == 3 + 6);  // 1e6 and 1e30 are beyond FP16 (the format or its scale/bias)
  }
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) CHECK(bad.size() == 3 + 2);  // 2^127, FLT_MAX
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
    for (float lim : {S::limit, -S::limit}) {  // the limit itself is representable
      auto x = random_row(gen, D, -2.0f, 2.0f);
      x[0] = lim;
      CHECK(S::find_unrepresentable(x.data(), D) == -1);
      CHECK_FALSE(store_and_check<S, R>(x, rng));
    }
  }
}

TEST_CASE_TEMPLATE("store: rows reaching the format's limit read back inside it", C, MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  // Int4: bias -65504 and max 65504 give a rounded-up FP16 scale of 8736, whose top code
  // would read back 65536; the other rows probe the same edge from other minima.
  const float L = S::limit;
  for (const std::vector<float>& x :
       {std::vector<float>{-L, L, 0.0f}, std::vector<float>{0.0f, L, 1.0f, 2.0f},
        std::vector<float>{L / 2, L}, std::vector<float>{-L, -L / 3, L / 3, L},
        std::vector<float>{-1.0f, L, -L, 3.0f, L, 0.5f}}) {
    for (std::uint32_t k = 0; k < 64; ++k) {
      const mpe::num::RowRng rng{31, k, 0, mpe::num::RoundingSite::StoreUpdate};
      INFO("row size " << x.size() << " draw " << k);
      CHECK_FALSE(store_and_check<S, R>(x, rng));  // representable: nothing saturates
    }
  }
}

namespace {
/// A row [lo, x, hi] whose element 1 has two grid neighbours base and base + step known
/// exactly (scale 1 for the integer formats, an ulp above 1.0 for the float formats).
template <class S>
struct StepRow {
  float lo, hi, base, step;
  bool base_is_even;  // which neighbour round-half-to-even picks
};
template <class S>
StepRow<S> step_row() {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) return {0.0f, 255.0f, 100.0f, 1.0f, true};
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) return {0.0f, 15.0f, 7.0f, 1.0f, false};
  if constexpr (std::is_same_v<S, mpe::Int2Rowwise>) return {0.0f, 3.0f, 1.0f, 1.0f, false};
  if constexpr (std::is_same_v<S, mpe::Fp16>) return {0.5f, 0.25f, 1.0f, 0x1p-10f, true};
  if constexpr (std::is_same_v<S, mpe::Bf16>) return {0.5f, 0.25f, 1.0f, 0x1p-7f, true};
  return {0.5f, 0.25f, 1.0f, 0x1p-23f, true};
}
}  // namespace

TEST_CASE_TEMPLATE("store: rounding between two grid points (unbiased stochastic, ties-to-even nearest)", C,
                   MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  const auto sr = step_row<S>();
  for (double f : {0.1, 0.5, 0.9}) {
    const float x = std::is_same_v<S, mpe::Fp32> ? sr.base : static_cast<float>(sr.base + f * sr.step);
    const double p = (static_cast<double>(x) - sr.base) / sr.step;  // the float x's exact fraction
    const std::vector<float> row_in = {sr.lo, x, sr.hi};
    const int n = 20000;
    double sum = 0;
    int ups = 0;
    for (int i = 0; i < n; ++i) {
      const mpe::num::RowRng rng{2024, static_cast<std::uint64_t>(i / 100),
                                 static_cast<std::uint32_t>(i % 100), mpe::num::RoundingSite::StoreUpdate};
      auto row = new_row<S>(3);
      quant<S, R>(row_in, row, rng);
      const double v = dequant<S>(row, 3)[1];
      REQUIRE((v == sr.base || v == static_cast<double>(sr.base) + sr.step));
      sum += v;
      ups += v != sr.base;
      if (!R::stochastic) {
        const bool up = p > 0.5 || (p == 0.5 && !sr.base_is_even);
        REQUIRE((v != sr.base) == up);
      }
    }
    if constexpr (R::stochastic) {
      const double mean = sum / n;
      // 4 standard errors of the two-point distribution (step * sqrt(p(1-p)/n)); the
      // rounding's own bias is below 2^-24 of a step
      const double se = sr.step * std::sqrt(p * (1 - p) / n);
      INFO("f = " << f << " mean " << mean << " x " << x << " ups " << ups);
      CHECK(std::fabs(mean - x) <= 4 * se + sr.step * 0x1p-24);
    }
  }
}

TEST_CASE_TEMPLATE("store: same seed and counter give the same bytes; stochastic seeds differ", C,
                   MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  std::mt19937 gen(4);
  const auto x = random_row(gen, 64, -1.0f, 1.0f);
  auto a = new_row<S>(64), b = new_row<S>(64), c = new_row<S>(64);
  quant<S, R>(x, a, {1, 10, 2, mpe::num::RoundingSite::WriteBack});
  quant<S, R>(x, b, {1, 10, 2, mpe::num::RoundingSite::WriteBack});
  quant<S, R>(x, c, {2, 10, 2, mpe::num::RoundingSite::WriteBack});
  CHECK(a == b);
  // Fp32 and nearest rounding draw nothing; a random row is never on the grid of the lower
  // formats, so 64 stochastic roundings under two seeds all agreeing has probability < 2^-40
  const bool random_bits = R::stochastic && !std::is_same_v<S, mpe::Fp32>;
  CHECK((a != c) == random_bits);
}

TEST_CASE_TEMPLATE("store: the code of the row maximum never wraps past the top code", C, MPE_ALL_COMBOS) {
  using S = typename C::Storage;
  using R = typename C::Rounding;
  if constexpr (is_int_rowwise<S>) {
    // Find rows [lo, hi] where hi's pre-rounding code v = (hi - bias) * (1/scale) (the
    // documented formula, in float) lands above the top code qmax: stochastic rounding
    // would then pick qmax + 1 with probability frac(v) (256 -> 0 in a u8, 16 -> 0 in a
    // nibble, 4 -> 0 in two bits) and nearest would too once v >= qmax + 0.5. The clamp
    // must keep qmax.
    const int qmax = kQmax<S>;
    std::mt19937 gen(12);
    std::uniform_real_distribution<float> u(0.5f, 2.0f);
    int found = 0;
    float best_v = 0;
    std::vector<float> best;
    for (int t = 0; t < 200000 && found < 50; ++t) {
      float lo, hi, v;
      if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
        lo = -u(gen);
        hi = u(gen);
        const float range = hi - lo;
        v = (hi - lo) * (255.0f / range);
      } else {
        // bias 0 (lo = 0) and hi = qmax * s for an FP16 s: scale = s exactly, v = hi * (1/s)
        const float s = static_cast<float>(ref_half(static_cast<std::uint16_t>(0x3c00 + (gen() % 0x2000))));
        lo = 0.0f;
        hi = static_cast<float>(qmax) * s;
        v = hi * (1.0f / s);
      }
      if (v > static_cast<float>(qmax)) {
        ++found;
        if (v > best_v) {
          best_v = v;
          best = {lo, hi};
        }
        const std::vector<float> x = {lo, hi};
        for (int i = 0; i < 64; ++i) {
          const mpe::num::RowRng rng{3, static_cast<std::uint64_t>(t), static_cast<std::uint32_t>(i),
                                     mpe::num::RoundingSite::StoreUpdate};
          auto row = new_row<S>(2);
          quant<S, R>(x, row, rng);
          REQUIRE(ref_code<S>(row.data(), 1) == qmax);
          REQUIRE(ref_code<S>(row.data(), 0) == 0);
        }
      }
    }
    INFO("rows with v > qmax found: " << found << ", largest v " << best_v);
    REQUIRE(found > 0);
    if constexpr (R::stochastic) {
      // frac(v) ~ 1e-5 (Int8) / 1e-6 (Int4): 2^22 draws make an unclamped wrap all but certain
      const std::vector<float> x = best;
      auto row = new_row<S>(2);
      for (std::uint32_t i = 0; i < (1u << 22); ++i) {
        const mpe::num::RowRng rng{77, i, 0, mpe::num::RoundingSite::StoreUpdate};
        S::template store<R>(x.data(), 2, row.data(), rng);
        if (ref_code<S>(row.data(), 1) != qmax)
          FAIL("code of the maximum wrapped to " << ref_code<S>(row.data(), 1));
      }
    }
  }
}

TEST_CASE_TEMPLATE(
    "Int4Rowwise, Int2Rowwise: a range so small that range / qmax underflows FP32 still gets a "
    "positive scale",
    S, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  // Found by the checkpoint fuzzer: [2^-149, 0, 0] made (max - bias) / 15 round to 0, so the
  // FP16 scale was 0 and its inverse inf, and the code of x == bias became 0 * inf = NaN.
  // (2^-149 / 3 rounds to 0 as well.)
  for (const std::vector<float>& x :
       {std::vector<float>{0x1p-149f, 0.0f, 0.0f}, std::vector<float>{0.0f, -0x1p-149f},
        std::vector<float>{0x1p-148f, 0x1p-149f, 0x1p-148f, 0.0f}}) {
    const int D = static_cast<int>(x.size());
    auto row = new_row<S>(D);
    for (bool stochastic : {false, true}) {
      const mpe::num::RowRng rng{3, 1, 0, mpe::num::RoundingSite::StoreUpdate};
      if (stochastic) {
        quant<S, mpe::StochasticRounding>(x, row, rng);
      } else {
        quant<S, mpe::NearestRounding>(x, row, rng);
      }
      const std::size_t nb = std::is_same_v<S, mpe::Int4Rowwise> ? static_cast<std::size_t>(D + 1) / 2
                                                                 : static_cast<std::size_t>(D + 3) / 4;
      const std::uint16_t scale_bits = static_cast<std::uint16_t>(row[nb] | row[nb + 1] << 8);
      CHECK(scale_bits == 1);  // 2^-24, the smallest FP16 scale
      const auto back = dequant<S>(row, D);
      for (int d = 0; d < D; ++d) {
        CHECK(std::isfinite(back[static_cast<std::size_t>(d)]));
        CHECK(std::fabs(back[static_cast<std::size_t>(d)] - x[static_cast<std::size_t>(d)]) <= 0x1p-24f);
      }
    }
  }
}

TEST_CASE("Int2Rowwise: FBGEMM's fused 2-bit bytes for a row on the integer grid") {
  // FBGEMM FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef, bit_rate 2, of this row: min 0
  // (bias 0), scale (3 - 0) / 3 = 1, codes = the values; column c goes to byte c / 4 at bit
  // (c % 4) * 2, then f16 scale 1.0 (0x3C00) and f16 bias 0, little-endian. Every rounding
  // gives these codes (each value lies on the grid).
  const std::vector<float> x = {0, 1, 2, 3, 3, 2, 1};
  const std::vector<std::uint8_t> fbgemm = {0xE4, 0x1B, 0x00, 0x3C, 0x00, 0x00};
  REQUIRE(mpe::Int2Rowwise::data_bytes(7) == fbgemm.size());
  for (std::uint64_t r = 0; r < 4; ++r) {
    const mpe::num::RowRng rng{7, r, 1, mpe::num::RoundingSite::StoreUpdate};
    auto a = new_row<mpe::Int2Rowwise>(7), b = new_row<mpe::Int2Rowwise>(7);
    quant<mpe::Int2Rowwise, mpe::NearestRounding>(x, a, rng);
    quant<mpe::Int2Rowwise, mpe::StochasticRounding>(x, b, rng);
    CHECK(std::equal(fbgemm.begin(), fbgemm.end(), a.begin()));
    CHECK(std::equal(fbgemm.begin(), fbgemm.end(), b.begin()));
    CHECK(dequant<mpe::Int2Rowwise>(a, 7) == x);
  }
  // Every code 0..3 at every position of a byte decodes to scale * q + bias.
  for (int q = 0; q < 4; ++q) {
    for (int k = 0; k < 4; ++k) {
      std::vector<std::uint8_t> row = {static_cast<std::uint8_t>(q << (2 * k)), 0x00, 0x48, 0x00, 0xBC};
      // f16 scale 8 (0x4800), f16 bias -1 (0xBC00); D = 4
      const mpe::Int2Rowwise::Reader rd(row.data(), 4);
      for (int d = 0; d < 4; ++d) CHECK(rd[d] == (d == k ? 8.0f * static_cast<float>(q) - 1.0f : -1.0f));
    }
  }
}
