// SPDX-License-Identifier: Apache-2.0
// io/interop.hpp: mpe rows <-> FBGEMM fused row-wise and TBE-inference / TorchRec rows,
// checked with decoders and encoders written here from the published layouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mpe/io/interop.hpp>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace {

using Bytes = std::vector<std::uint8_t>;
namespace io = mpe::interop;

double ref_half(std::uint16_t h) {  // IEEE binary16
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(static_cast<double>(m), -24)
                    : (e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1.0 + m / 1024.0, e - 15));
  return s ? -v : v;
}
std::uint16_t u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
float f32le(const std::uint8_t* p) {
  std::uint32_t u = 0;
  for (int i = 3; i >= 0; --i) u = (u << 8) | p[i];
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
void put32(std::uint8_t* p, float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(u >> (8 * i));
}
float bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// The FBGEMM fused N-bit formats (f16 scale and bias after the packed codes).
template <class S>
constexpr bool is_nbit = std::is_same_v<S, mpe::Int4Rowwise> || std::is_same_v<S, mpe::Int2Rowwise>;
template <class S>
constexpr bool is_q = std::is_same_v<S, mpe::Int8Rowwise> || is_nbit<S>;
template <class S>
constexpr int kQmax = std::is_same_v<S, mpe::Int8Rowwise> ? 255
                                                          : (std::is_same_v<S, mpe::Int4Rowwise> ? 15 : 3);
template <class S>
std::size_t code_bytes(int D) {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) return static_cast<std::size_t>(D);
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) return static_cast<std::size_t>(D + 1) / 2;
  return static_cast<std::size_t>(D + 3) / 4;
}
template <class S>
int code_at(const std::uint8_t* codes, int d) {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) return codes[d];
  if constexpr (std::is_same_v<S, mpe::Int4Rowwise>)
    return (codes[d / 2] >> (4 * (d % 2))) & 15;  // element 2i low nibble, 2i+1 high nibble
  return (codes[d / 4] >> (2 * (d % 4))) & 3;     // element 4i+k in bits 2k..2k+1 of byte i
}
template <class S>
void set_code(std::uint8_t* codes, int d, int q) {
  if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
    codes[d] = static_cast<std::uint8_t>(q);
  } else if constexpr (std::is_same_v<S, mpe::Int4Rowwise>) {
    codes[d / 2] = static_cast<std::uint8_t>(codes[d / 2] | (q << (4 * (d % 2))));
  } else {
    codes[d / 4] = static_cast<std::uint8_t>(codes[d / 4] | (q << (2 * (d % 4))));
  }
}
template <class S>
float plain_at(const std::uint8_t* p, int d) {
  if constexpr (std::is_same_v<S, mpe::Fp32>) return f32le(p + 4 * d);
  if constexpr (std::is_same_v<S, mpe::Fp16>) return static_cast<float>(ref_half(u16(p + 2 * d)));
  return bf16(u16(p + 2 * d));
}

/// x = scale * q + bias in FP32 (FBGEMM's reference dequantization).
float deq(float scale, int q, float bias) { return scale * static_cast<float>(q) + bias; }

// ---------- independent decoders of the external layouts ----------

/// FBGEMM fused: Int8 = D codes (padded to code_alignment), f32 scale, f32 bias; Int4 =
/// ceil(D/2) code bytes, Int2 = ceil(D/4) code bytes, then f16 scale, f16 bias; plain
/// formats = D elements.
template <class S>
std::vector<float> decode_fused(const std::uint8_t* p, int D, int code_alignment = 1) {
  std::vector<float> out(static_cast<std::size_t>(D));
  for (int d = 0; d < D; ++d) {
    float v;
    if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
      const std::size_t cb = round_up(static_cast<std::size_t>(D), static_cast<std::size_t>(code_alignment));
      v = deq(f32le(p + cb), p[d], f32le(p + cb + 4));
    } else if constexpr (is_nbit<S>) {
      const std::size_t nb = code_bytes<S>(D);
      v = deq(static_cast<float>(ref_half(u16(p + nb))), code_at<S>(p, d),
              static_cast<float>(ref_half(u16(p + nb + 2))));
    } else {
      v = plain_at<S>(p, d);
    }
    out[static_cast<std::size_t>(d)] = v;
  }
  return out;
}

/// TBE inference: [f16 scale][f16 bias][codes] (or codes first with scale_bias_last),
/// padded to row_alignment; FP16/FP32 plain.
template <class S>
std::vector<float> decode_tbe(const std::uint8_t* p, int D, bool last) {
  std::vector<float> out(static_cast<std::size_t>(D));
  for (int d = 0; d < D; ++d) {
    if constexpr (is_q<S>) {
      const std::uint8_t* qp = last ? p + code_bytes<S>(D) : p;
      const std::uint8_t* codes = last ? p : p + 4;
      out[static_cast<std::size_t>(d)] = deq(static_cast<float>(ref_half(u16(qp))), code_at<S>(codes, d),
                                             static_cast<float>(ref_half(u16(qp + 2))));
    } else {
      out[static_cast<std::size_t>(d)] = plain_at<S>(p, d);
    }
  }
  return out;
}

template <class S>
std::vector<float> mpe_values(const std::uint8_t* row, int D) {
  const typename S::Reader r(row, D);
  std::vector<float> out(static_cast<std::size_t>(D));
  for (int d = 0; d < D; ++d) out[static_cast<std::size_t>(d)] = r[d];
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

/// An mpe store of `rows` random rows (mpe padding to `align`).
template <class S>
Bytes mpe_store(int rows, int D, int align, std::mt19937& gen, float span = 1.0f) {
  const std::size_t sb = mpe::row_bytes<S>(D, align);
  Bytes store(rows * sb, 0);
  std::uniform_real_distribution<float> u(-span, span);
  std::vector<float> x(static_cast<std::size_t>(D));
  for (int r = 0; r < rows; ++r) {
    for (auto& v : x) v = u(gen);
    if (r == 1) std::fill(x.begin(), x.end(), 0.375f);  // a constant row
    S::template store<mpe::StochasticRounding>(
        x.data(), D, store.data() + r * sb,
        {9, static_cast<std::uint64_t>(r), 0, mpe::num::RoundingSite::SetWeights});
  }
  return store;
}

/// Random external rows written by an independent encoder: random codes and parameters
/// (or plain elements) in the published layout.
template <class S>
Bytes encode_external(int rows, std::size_t eb, int D, bool tbe, bool last, int code_alignment,
                      std::mt19937& gen) {
  Bytes out(rows * eb, 0);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_real_distribution<float> us(0.0f, 0.05f);
  for (int r = 0; r < rows; ++r) {
    std::uint8_t* p = out.data() + r * eb;
    if constexpr (is_q<S>) {
      const bool f16_params = tbe || is_nbit<S>;
      const std::size_t cb =
          std::is_same_v<S, mpe::Int8Rowwise> && !tbe
              ? round_up(static_cast<std::size_t>(D), static_cast<std::size_t>(code_alignment))
              : code_bytes<S>(D);
      std::uint8_t* codes = tbe && !last ? p + 4 : p;
      std::uint8_t* qp = tbe && !last ? p : p + cb;
      for (int d = 0; d < D; ++d) set_code<S>(codes, d, static_cast<int>(gen() % (kQmax<S> + 1)));
      const float scale = us(gen), bias = u(gen);
      if (f16_params) {
        put16(qp, mpe::num::float_to_half<mpe::NearestRounding>(scale).bits);
        put16(qp + 2, mpe::num::float_to_half<mpe::NearestRounding>(bias).bits);
      } else {
        put32(qp, scale);
        put32(qp + 4, bias);
      }
    } else {
      for (int d = 0; d < D; ++d) {
        const float v = u(gen);
        if constexpr (std::is_same_v<S, mpe::Fp32>) {
          put32(p + 4 * d, v);
        } else if constexpr (std::is_same_v<S, mpe::Fp16>) {
          put16(p + 2 * d, mpe::num::float_to_half<mpe::NearestRounding>(v).bits);
        } else {
          put16(p + 2 * d, mpe::num::float_to_bf16<mpe::NearestRounding>(v).bits);
        }
      }
    }
  }
  return out;
}

const int kDims[] = {1, 2, 3, 7, 16, 33};
const int kRows = 6;

}  // namespace

TEST_CASE_TEMPLATE("FbgemmFused: export decodes to mpe's values; import reads FBGEMM's values", S, mpe::Fp32,
                   mpe::Fp16, mpe::Bf16, mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  std::mt19937 gen(21);
  for (int D : kDims) {
    for (int align : {1, 4, 16}) {
      for (int ca : {1, 4}) {
        if (ca == 4 && !std::is_same_v<S, mpe::Int8Rowwise>) continue;
        const io::FbgemmFused layout{ca};
        const std::size_t eb = io::external_row_bytes<S>(layout, D);
        // published sizes: D + 8 (codes padded to code_alignment), ceil(D/2) + 4, ceil(D/4) + 4,
        // 4D, 2D
        if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) CHECK(eb == round_up(D, ca) + 8);
        if constexpr (std::is_same_v<S, mpe::Int4Rowwise>)
          CHECK(eb == static_cast<std::size_t>((D + 1) / 2 + 4));
        if constexpr (std::is_same_v<S, mpe::Int2Rowwise>)
          CHECK(eb == static_cast<std::size_t>((D + 3) / 4 + 4));
        if constexpr (std::is_same_v<S, mpe::Fp32>) CHECK(eb == static_cast<std::size_t>(4 * D));
        if constexpr (std::is_same_v<S, mpe::Fp16> || std::is_same_v<S, mpe::Bf16>)
          CHECK(eb == static_cast<std::size_t>(2 * D));
        const std::size_t sb = mpe::row_bytes<S>(D, align);
        INFO("D = " << D << " align = " << align << " code_alignment = " << ca);

        // mpe -> FBGEMM, per table and per row
        const Bytes store = mpe_store<S>(kRows, D, align, gen);
        Bytes ext(kRows * eb, 0xCD);
        io::export_table<S>(layout, store, kRows, D, align, ext);
        for (int r = 0; r < kRows; ++r) {
          const auto want = mpe_values<S>(store.data() + r * sb, D);
          REQUIRE(same_bits(decode_fused<S>(ext.data() + r * eb, D, ca), want));
          Bytes one(eb, 0xCD);
          io::export_row<S>(layout, std::span(store.data() + r * sb, sb), D, align, one);
          REQUIRE(std::equal(one.begin(), one.end(), ext.begin() + static_cast<std::ptrdiff_t>(r * eb)));
          if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
            for (std::size_t i = static_cast<std::size_t>(D); i < round_up(D, ca); ++i)
              REQUIRE(ext[r * eb + i] == 0);
          }
        }

        // FBGEMM -> mpe
        const Bytes in = encode_external<S>(kRows, eb, D, false, false, ca, gen);
        Bytes back(kRows * sb, 0xEE);
        io::import_table<S>(layout, in, kRows, D, align, back);
        for (int r = 0; r < kRows; ++r) {
          REQUIRE(
              same_bits(mpe_values<S>(back.data() + r * sb, D), decode_fused<S>(in.data() + r * eb, D, ca)));
          for (std::size_t i = S::data_bytes(D); i < sb; ++i)
            REQUIRE(back[r * sb + i] == 0);  // mpe padding zeroed
          Bytes one(sb, 0xEE);
          io::import_row<S>(layout, std::span(in.data() + r * eb, eb), D, align, one);
          REQUIRE(std::equal(one.begin(), one.end(), back.begin() + static_cast<std::ptrdiff_t>(r * sb)));
        }
        // and FBGEMM -> mpe -> FBGEMM gives the same bytes (canonical input: zero padding)
        Bytes again(kRows * eb);
        io::export_table<S>(layout, back, kRows, D, align, again);
        CHECK(again == in);
      }
    }
  }
}

TEST_CASE_TEMPLATE("TbeInference (TorchRec): export decodes to mpe's values; import reads TBE values", S,
                   mpe::Fp32, mpe::Fp16, mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  std::mt19937 gen(22);
  for (int D : kDims) {
    for (int align : {1, 4}) {
      for (int ra : {1, 16}) {
        for (bool last : {false, true}) {
          const io::TbeInference layout{ra, last};
          const std::size_t eb = io::external_row_bytes<S>(layout, D);
          std::size_t unpadded = is_q<S> ? code_bytes<S>(D) + 4 : S::data_bytes(D);
          CHECK(eb == round_up(unpadded, ra));  // rounded_row_size_in_bytes
          const std::size_t sb = mpe::row_bytes<S>(D, align);
          INFO("D = " << D << " align = " << align << " row_alignment = " << ra << " last = " << last);

          const Bytes store = mpe_store<S>(kRows, D, align, gen);
          Bytes ext(kRows * eb, 0xCD);
          io::export_table<S>(layout, store, kRows, D, align, ext);
          for (int r = 0; r < kRows; ++r) {
            const auto want = mpe_values<S>(store.data() + r * sb, D);
            const auto got = decode_tbe<S>(ext.data() + r * eb, D, last);
            for (std::size_t i = unpadded; i < eb; ++i) REQUIRE(ext[r * eb + i] == 0);  // row padding
            if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) {
              // re-quantized with f16 parameters: bias = min rounded down to FP16, scale >=
              // (max - bias)/255, each value within half a step (+ float rounding: 8 ulps of
              // the largest magnitude involved) of mpe's
              const std::uint8_t* qp = last ? ext.data() + r * eb + D : ext.data() + r * eb;
              const double s = ref_half(u16(qp)), b = ref_half(u16(qp + 2));
              const double mn = *std::min_element(want.begin(), want.end());
              const double mx = *std::max_element(want.begin(), want.end());
              if (mn == mx) {
                REQUIRE(s == 0.0);
                REQUIRE(std::fabs(b - mn) <=
                        std::ldexp(1.0, std::ilogb(std::max(std::fabs(mn), 0x1p-14)) - 11));
              } else {
                REQUIRE(b <= mn);
                REQUIRE(mn - b <= std::ldexp(1.0, std::ilogb(std::max(std::fabs(mn), 0x1p-14)) - 10));
                REQUIRE(s * 255 >= (mx - b) * (1 - 0x1p-22));
              }
              for (int d = 0; d < D; ++d) {
                const double big = std::max({std::fabs(mn), std::fabs(mx), std::fabs(b) + 255 * s});
                // a constant row (s = 0) is off by the FP16 rounding of its bias instead
                const double half_ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(mn), 0x1p-14)) - 11);
                REQUIRE(std::fabs(got[static_cast<std::size_t>(d)] - want[static_cast<std::size_t>(d)]) <=
                        (mn == mx ? half_ulp : s / 2 + 8 * 0x1p-24 * big));
              }
            } else {
              REQUIRE(same_bits(got, want));  // a byte move
            }
          }

          const Bytes in = encode_external<S>(kRows, eb, D, true, last, 1, gen);
          Bytes back(kRows * sb, 0xEE);
          io::import_table<S>(layout, in, kRows, D, align, back);
          for (int r = 0; r < kRows; ++r) {
            // exact: TBE INT8's f16 parameters become mpe's f32 ones without rounding
            REQUIRE(same_bits(mpe_values<S>(back.data() + r * sb, D),
                              decode_tbe<S>(in.data() + r * eb, D, last)));
            for (std::size_t i = S::data_bytes(D); i < sb; ++i) REQUIRE(back[r * sb + i] == 0);
          }
          if constexpr (!std::is_same_v<S, mpe::Int8Rowwise>) {
            Bytes again(kRows * eb);
            io::export_table<S>(layout, back, kRows, D, align, again);
            CHECK(again == in);
          }
        }
      }
    }
  }
}

TEST_CASE("interop: wrong sizes and arguments throw std::invalid_argument and change nothing") {
  std::mt19937 gen(23);
  const int D = 7, align = 4;
  const std::size_t sb = mpe::row_bytes<mpe::Int4Rowwise>(D, align);
  const io::TbeInference tbe{16, false};
  const std::size_t eb = io::external_row_bytes<mpe::Int4Rowwise>(tbe, D);
  const Bytes store = mpe_store<mpe::Int4Rowwise>(3, D, align, gen);
  Bytes out(3 * eb, 0x11);
  const Bytes out0 = out;
  CHECK_THROWS_AS(
      io::export_table<mpe::Int4Rowwise>(tbe, store, 3, D, align, std::span(out.data(), out.size() - 1)),
      std::invalid_argument);
  CHECK_THROWS_AS(
      io::export_table<mpe::Int4Rowwise>(tbe, std::span(store.data(), store.size() - 1), 3, D, align, out),
      std::invalid_argument);
  CHECK_THROWS_AS(io::export_table<mpe::Int4Rowwise>(tbe, store, 2, D, align, out), std::invalid_argument);
  CHECK_THROWS_AS(io::export_table<mpe::Int4Rowwise>(tbe, store, -1, D, align, out), std::invalid_argument);
  CHECK_THROWS_AS(io::export_table<mpe::Int4Rowwise>(tbe, store, 3, D, 3, out), std::invalid_argument);
  CHECK_THROWS_AS(io::export_table<mpe::Int4Rowwise>(io::TbeInference{12, false}, store, 3, D, align, out),
                  std::invalid_argument);
  CHECK_THROWS_AS(io::external_row_bytes<mpe::Int4Rowwise>(tbe, 0), std::invalid_argument);
  CHECK_THROWS_AS(io::external_row_bytes<mpe::Int8Rowwise>(io::FbgemmFused{0}, 4), std::invalid_argument);
  CHECK_THROWS_AS(io::export_row<mpe::Int4Rowwise>(tbe, std::span(store.data(), sb - 1), D, align,
                                                   std::span(out.data(), eb)),
                  std::invalid_argument);
  CHECK(out == out0);
  Bytes back(3 * sb, 0x22);
  const Bytes back0 = back;
  CHECK_THROWS_AS(
      io::import_table<mpe::Int4Rowwise>(tbe, std::span(out.data(), out.size() - 16), 3, D, align, back),
      std::invalid_argument);
  CHECK_THROWS_AS(io::import_row<mpe::Int4Rowwise>(tbe, std::span(out.data(), eb), D, align,
                                                   std::span(back.data(), sb + 1)),
                  std::invalid_argument);
  CHECK(back == back0);
  try {
    io::external_row_bytes<mpe::Int4Rowwise>(io::TbeInference{12, false}, 4);
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("row_alignment") != std::string::npos);
    CHECK(std::string(e.what()).find("12") != std::string::npos);
  }
}

TEST_CASE_TEMPLATE(
    "interop import: a row encoding a value the format cannot hold is rejected, nothing written", S,
    mpe::Fp32, mpe::Fp16, mpe::Int8Rowwise, mpe::Int4Rowwise, mpe::Int2Rowwise) {
  std::mt19937 gen(24);
  const int D = 5, align = 4, rows = 4;
  const std::size_t sb = mpe::row_bytes<S>(D, align);
  for (bool tbe : {false, true}) {
    const io::TbeInference tl{16, false};
    const io::FbgemmFused fl{1};
    const std::size_t eb = tbe ? io::external_row_bytes<S>(tl, D) : io::external_row_bytes<S>(fl, D);
    std::vector<Bytes> bads;
    const Bytes good = encode_external<S>(rows, eb, D, tbe, false, 1, gen);
    auto with = [&](auto poke) {
      Bytes b = good;
      poke(b.data() + 2 * eb);  // row 2
      bads.push_back(b);
    };
    const bool f16_params = tbe || is_nbit<S>;
    if constexpr (is_q<S>) {
      const std::size_t qoff = tbe ? 0 : code_bytes<S>(D);
      if (f16_params) {
        with([&](std::uint8_t* p) { put16(p + qoff, 0x7c00); });      // scale +Inf
        with([&](std::uint8_t* p) { put16(p + qoff + 2, 0x7e00); });  // bias NaN
        with([&](std::uint8_t* p) {  // bias -65504, scale 65504, every code at its top: beyond
          put16(p + qoff, 0x7bff);   // Int4's limit 65504 (fine for Int8, whose limit is 2^126)
          // Int2's top code 3 would read 131008, beyond by only one scale (then saturated):
          // bias +65504 there, reading 262016
          put16(p + qoff + 2, std::is_same_v<S, mpe::Int2Rowwise> ? 0x7bff : 0xfbff);
          std::uint8_t* codes = tbe ? p + 4 : p;
          for (std::size_t i = 0; i < code_bytes<S>(D); ++i) codes[i] = 0xff;
        });
        if constexpr (std::is_same_v<S, mpe::Int8Rowwise>) bads.pop_back();  // Int8 holds that range
      } else {
        with([&](std::uint8_t* p) { put32(p + qoff, std::numeric_limits<float>::quiet_NaN()); });
        with([&](std::uint8_t* p) { put32(p + qoff + 4, -std::numeric_limits<float>::infinity()); });
        with([&](std::uint8_t* p) { put32(p + qoff + 4, 0x1p127f); });  // beyond Int8's limit 2^126
        with([&](std::uint8_t* p) {  // bias + 255 * scale overflows at the top code
          put32(p + qoff, 0x1p125f);
          put32(p + qoff + 4, 0.0f);
          for (int i = 0; i < D; ++i) p[i] = 0xff;
        });
      }
    } else if constexpr (std::is_same_v<S, mpe::Fp32>) {
      with([&](std::uint8_t* p) { put32(p + 8, std::numeric_limits<float>::quiet_NaN()); });
      with([&](std::uint8_t* p) { put32(p + 4, std::numeric_limits<float>::infinity()); });
    } else {
      with([&](std::uint8_t* p) { put16(p + 2, 0x7c00); });
      with([&](std::uint8_t* p) { put16(p + 4, 0xfe00); });
    }
    REQUIRE(!bads.empty());
    for (const Bytes& b : bads) {
      Bytes store(rows * sb, 0x5A);
      const Bytes before = store;
      if (tbe) {
        CHECK_THROWS_AS(io::import_table<S>(tl, b, rows, D, align, store), std::invalid_argument);
        CHECK_THROWS_AS(
            io::import_row<S>(tl, std::span(b.data() + 2 * eb, eb), D, align, std::span(store.data(), sb)),
            std::invalid_argument);
      } else {
        CHECK_THROWS_AS(io::import_table<S>(fl, b, rows, D, align, store), std::invalid_argument);
        CHECK_THROWS_AS(
            io::import_row<S>(fl, std::span(b.data() + 2 * eb, eb), D, align, std::span(store.data(), sb)),
            std::invalid_argument);
      }
      CHECK(store == before);  // rows 0 and 1 were fine, yet nothing was written
      try {
        if (tbe) {
          io::import_table<S>(tl, b, rows, D, align, store);
        } else {
          io::import_table<S>(fl, b, rows, D, align, store);
        }
      } catch (const std::invalid_argument& e) {
        CHECK(std::string(e.what()).find("row 2") != std::string::npos);
      }
    }
    Bytes store(rows * sb);
    if (tbe) {
      CHECK_NOTHROW(io::import_table<S>(tl, good, rows, D, align, store));
    } else {
      CHECK_NOTHROW(io::import_table<S>(fl, good, rows, D, align, store));
    }
  }
}

TEST_CASE("interop export: Int8 rows beyond FP16 cannot go to the TBE's f16 parameters") {
  const int D = 4, align = 4;
  const std::size_t sb = mpe::row_bytes<mpe::Int8Rowwise>(D, align);
  Bytes store(2 * sb);
  const std::vector<float> ok = {1, 2, 3, 4}, big = {1, 2, 3, 1e5f};
  mpe::Int8Rowwise::store<mpe::NearestRounding>(ok.data(), D, store.data(), {});
  mpe::Int8Rowwise::store<mpe::NearestRounding>(big.data(), D, store.data() + sb, {});
  const io::TbeInference tl{16, false};
  const std::size_t eb = io::external_row_bytes<mpe::Int8Rowwise>(tl, D);
  Bytes out(2 * eb, 0x33);
  const Bytes out0 = out;
  CHECK_THROWS_AS(io::export_table<mpe::Int8Rowwise>(tl, store, 2, D, align, out), std::invalid_argument);
  CHECK_THROWS_AS(io::export_row<mpe::Int8Rowwise>(tl, std::span(store.data() + sb, sb), D, align,
                                                   std::span(out.data(), eb)),
                  std::invalid_argument);
  CHECK(out == out0);
  CHECK_NOTHROW(
      io::export_row<mpe::Int8Rowwise>(tl, std::span(store.data(), sb), D, align, std::span(out.data(), eb)));
  // the fused 8-bit layout keeps f32 parameters: no limit there
  Bytes fused(2 * io::external_row_bytes<mpe::Int8Rowwise>(io::FbgemmFused{}, D));
  CHECK_NOTHROW(io::export_table<mpe::Int8Rowwise>(io::FbgemmFused{}, store, 2, D, align, fused));
}

TEST_CASE("interop import: the codes a row holds decide its range, not the header's top code") {
  // FBGEMM's quantizers write scale 1.0 for a constant row: {65504, 65504} is bias 65504,
  // scale 1, codes 0 — the unused top code (65519) lies beyond FP16, the row does not.
  const int D = 2, align = 4;
  const std::size_t sb = mpe::row_bytes<mpe::Int4Rowwise>(D, align);
  Bytes store(sb);
  const io::FbgemmFused fl{1};
  const Bytes constant = {0x00, 0x00, 0x3C, 0xFF, 0x7B};  // codes, f16 scale 1.0, f16 bias 65504
  REQUIRE(constant.size() == io::external_row_bytes<mpe::Int4Rowwise>(fl, D));
  CHECK_NOTHROW(io::import_table<mpe::Int4Rowwise>(fl, constant, 1, D, align, store));
  const mpe::Int4Rowwise::Reader rd(store.data(), D);
  CHECK(rd[0] == 65504.0f);
  CHECK(rd[1] == 65504.0f);
  // bias -65504, scale 8736 (top code would read 65536): codes 0 and 14 read -65504 and 56800
  const Bytes low = {0xE0, 0x44, 0x70, 0xFF, 0xFB};
  CHECK_NOTHROW(io::import_table<mpe::Int4Rowwise>(fl, low, 1, D, align, store));
  // the same header with code 15 present: element 1 reads 65536, beyond FP16 by 32, less
  // than one step (scale 8736): the row is imported saturated (re-quantized from
  // [-65504, 65504]) and counted
  Bytes high = low;
  high[0] = 0xF0;
  CHECK(io::import_table<mpe::Int4Rowwise>(fl, high, 1, D, align, store) == 1);
  const mpe::Int4Rowwise::Reader sat(store.data(), D);
  CHECK(sat[0] == -65504.0f);
  CHECK(sat[1] <= 65504.0f);
  CHECK(sat[1] >= 65504.0f - 8736.0f);
  CHECK(io::import_row<mpe::Int4Rowwise>(fl, high, D, align, store));
  // beyond by more than one step: refused, naming row, element and value
  Bytes far = high;
  far[1] = 0xFF;
  far[2] = 0x7B;  // scale 65504: element 1 reads 917056
  try {
    io::import_table<mpe::Int4Rowwise>(fl, far, 1, D, align, store);
    FAIL("expected std::invalid_argument");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("row 0 holds element 1 = 917056") != std::string::npos);
  }
}

TEST_CASE(
    "interop: fused 2-bit rows near the FP16 maximum import saturated; the unused top bits are cleared") {
  const int D = 3, align = 4;
  const std::size_t sb = mpe::row_bytes<mpe::Int2Rowwise>(D, align);
  const io::FbgemmFused fl{1};
  REQUIRE(io::external_row_bytes<mpe::Int2Rowwise>(fl, D) == 5);
  Bytes store(sb, 0x77);
  // codes {1, 2, 3} in bits 0..5 and junk in bits 6..7 of the one code byte; f16 scale 1.0,
  // f16 bias 0: reads {1, 2, 3}; the junk bits are not an element and are dropped
  const Bytes junk = {0x39 | 0xC0, 0x00, 0x3C, 0x00, 0x00};
  CHECK(io::import_table<mpe::Int2Rowwise>(fl, junk, 1, D, align, store) == 0);
  CHECK(store[0] == 0x39);
  const mpe::Int2Rowwise::Reader rd(store.data(), D);
  CHECK(rd[0] == 1.0f);
  CHECK(rd[1] == 2.0f);
  CHECK(rd[2] == 3.0f);
  Bytes back(5);
  io::export_table<mpe::Int2Rowwise>(fl, store, 1, D, align, back);
  CHECK(back == Bytes{0x39, 0x00, 0x3C, 0x00, 0x00});
  // bias 0, scale 21840 (f16 0x7555, FBGEMM's nearest FP16 of 65504 / 3), code 3: reads
  // 65520, beyond FP16 by 16 (less than a step): imported saturated, counted, within range
  const Bytes high = {0x30, 0x55, 0x75, 0x00, 0x00};  // codes {0, 0, 3}
  CHECK(io::import_table<mpe::Int2Rowwise>(fl, high, 1, D, align, store) == 1);
  const mpe::Int2Rowwise::Reader sat(store.data(), D);
  CHECK(sat[0] == 0.0f);
  CHECK(sat[2] <= 65504.0f);
  CHECK(sat[2] >= 65504.0f - 21840.0f);
  // scale 32768 (0x7800): code 3 reads 98304, beyond by more than a step: refused
  const Bytes far = {0x30, 0x00, 0x78, 0x00, 0x00};
  Bytes before = store;
  CHECK_THROWS_AS(io::import_table<mpe::Int2Rowwise>(fl, far, 1, D, align, store), std::invalid_argument);
  CHECK(store == before);
}
