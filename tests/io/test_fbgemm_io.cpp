// SPDX-License-Identifier: Apache-2.0
// Export to / import from FBGEMM and TorchRec table layouts (mpe/io/fbgemm.hpp), checked
// by a decoder and an encoder written here from the published layouts:
//   fused 8-bit row-wise: D x u8, f32 scale, f32 bias (FBGEMM FloatToFused8BitRowwiseQuantized)
//   fused 4-bit row-wise: ceil(D/2) x u8 (element 2i low nibble), f16 scale, f16 bias
//                         (FloatToFusedNBitRowwiseQuantizedSBHalf)
//   fused 2-bit row-wise: ceil(D/4) x u8 (element 4i+k in bits 2k..2k+1 of byte i), f16
//                         scale, f16 bias (the same op, bit_rate 2)
//   TBE inference / TorchRec: f16 scale, f16 bias, codes, row padded to row_alignment
//                         (fbgemm_gpu quantize_embs / IntNBitTableBatchedEmbeddingBagsCodegen)
// value = scale * q + bias (computed here with contraction off, like the reference ops).
#include <cmath>
#include <mpe/io/fbgemm.hpp>

#include "io/checkpoint_common.hpp"

namespace {

float f32_at(const std::uint8_t* p) {
  float x;
  std::memcpy(&x, p, 4);
  return x;
}
float f16_at(const std::uint8_t* p) {
  return mpe::num::half_to_float(static_cast<std::uint16_t>(p[0] | p[1] << 8));
}

struct Decoded {
  std::vector<float> values, scales;
};

// Decoder of the published layouts; `tbe` = scale/bias in front, rows of `row_bytes`.
Decoded decode(const std::vector<std::uint8_t>& b, std::int64_t rows, int D, int bits, bool tbe,
               std::size_t row_bytes) {
  REQUIRE(b.size() == static_cast<std::size_t>(rows) * row_bytes);
  Decoded d;
  const std::size_t per_byte = static_cast<std::size_t>(8 / bits);  // elements per code byte
  const std::size_t codes = (static_cast<std::size_t>(D) + per_byte - 1) / per_byte;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* row = b.data() + static_cast<std::size_t>(r) * row_bytes;
    float scale, bias;
    const std::uint8_t* q = row;
    if (tbe) {
      scale = f16_at(row);
      bias = f16_at(row + 2);
      q = row + 4;
    } else if (bits == 8) {
      scale = f32_at(row + D);
      bias = f32_at(row + D + 4);
    } else {  // fused N-bit: f16 scale and bias after the code bytes
      scale = f16_at(row + codes);
      bias = f16_at(row + codes + 2);
    }
    for (int i = 0; i < D; ++i) {
      // FBGEMM's N-bit packing: element i in byte i / (8/N), shifted by (i % (8/N)) * N
      const unsigned code = (static_cast<unsigned>(q[static_cast<std::size_t>(i) / per_byte]) >>
                             (static_cast<std::size_t>(i) % per_byte * static_cast<std::size_t>(bits))) &
                            ((1u << bits) - 1);
      d.values.push_back(scale * static_cast<float>(code) + bias);
    }
    d.scales.push_back(scale);
    if (tbe) {
      for (std::size_t k = 4 + codes; k < row_bytes; ++k) CHECK(row[k] == 0);  // padding is zero
    }
  }
  return d;
}

std::vector<float> table_weights(const auto& e, std::int64_t t) {
  std::vector<float> w(
      static_cast<std::size_t>(e.config().table_rows[static_cast<std::size_t>(t)] * e.dim()));
  e.get_weights(w, e.table_offset(t));
  return w;
}

mpe::EmbeddingConfig io_config(std::int64_t cache_rows) {
  mpe::EmbeddingConfig c;
  c.table_rows = {30, 17};
  c.dim = 5;
  c.cache_rows = cache_rows;
  c.seed = 11;
  return c;
}

std::vector<float> ramp(std::size_t n) {
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  return w;
}

}  // namespace

TEST_CASE("Int8Rowwise export: fused 8-bit bytes decode to the store's values; TBE INT8 within half a step") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding>;
  E e(io_config(0));
  e.set_weights(ramp(47 * 5));
  const auto fused = mpe::io::export_table(e, 1, mpe::interop::FbgemmFused{});
  const Decoded d = decode(fused, 17, 5, 8, false, 5 + 8);
  CHECK(ckt::same_bits(d.values, table_weights(e, 1)));
  const auto tbe = mpe::io::export_table(e, 1, mpe::interop::TbeInference{16});
  const Decoded t = decode(tbe, 17, 5, 8, true, 16);  // 4 + 5 bytes padded to 16
  const auto w = table_weights(e, 1);
  for (std::size_t i = 0; i < w.size(); ++i) {
    // Re-quantized to f16 parameters: each value moves by at most half the new step, plus
    // float rounding of scale * q + bias (|x| <= 3, so 1e-5 covers it).
    CHECK(std::fabs(t.values[i] - w[i]) <= 0.5f * t.scales[i / 5] + 1e-5f);
  }
  // Converting export: FP32 rows hold the dequantized store exactly.
  const auto f32 = mpe::io::export_table<mpe::Fp32>(e, 0, mpe::interop::FbgemmFused{});
  std::vector<float> x(30 * 5);
  REQUIRE(f32.size() == x.size() * 4);
  std::memcpy(x.data(), f32.data(), f32.size());
  CHECK(ckt::same_bits(x, table_weights(e, 0)));
}

TEST_CASE("Int4Rowwise with dirty cache rows: export flushes; import of the export restores the store") {
  using E = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<4>, mpe::StochasticRounding>;
  const auto c = io_config(16);
  E a(c);
  a.init_uniform(-1.0f, 1.0f);
  for (std::uint64_t k = 0; k < 8; ++k) ckt::train_step(a, k, mpe::Sgd{0.5f});
  const auto w_a = table_weights(a, 0);  // cached rows: FP32 values
  const std::uint64_t wb = a.stats().writebacks;
  const auto fused = mpe::io::export_table(a, 0, mpe::interop::FbgemmFused{});
  CHECK(a.stats().writebacks > wb);  // the export flushed dirty rows
  const Decoded d = decode(fused, 30, 5, 4, false, 3 + 4);
  for (std::size_t i = 0; i < w_a.size(); ++i) {
    // A cached row's flush rounds each value stochastically to one of its two neighbouring
    // grid points: within one quantization step (scale) of the FP32 value.
    CHECK(std::fabs(d.values[i] - w_a[i]) <= d.scales[i / 5] * (1.0f + 1e-3f));
  }
  const auto tbe = mpe::io::export_table(a, 0, mpe::interop::TbeInference{16});
  const Decoded t = decode(tbe, 30, 5, 4, true, 16);
  CHECK(ckt::same_bits(t.values, d.values));  // the same codes and f16 parameters, moved

  E b(c);
  mpe::io::import_table(b, 0, mpe::interop::FbgemmFused{}, fused);
  CHECK(ckt::same_bits(table_weights(b, 0), d.values));
  E b2(c);
  mpe::io::import_table(b2, 0, mpe::interop::TbeInference{16}, tbe);
  CHECK(ckt::same_bits(table_weights(b2, 0), d.values));
}

TEST_CASE(
    "import of hand-encoded TBE INT4 rows: exact values, only the table's lines dropped, step and optimizer "
    "kept") {
  using E = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto c = io_config(16);
  E e(c);
  e.init_uniform(-1.0f, 1.0f);
  for (std::uint64_t k = 0; k < 4; ++k) ckt::train_step(e, k, mpe::RowwiseAdagrad{0.1f});
  const auto step = e.step();
  const auto opt_bytes = e.memory().optimizer_bytes;
  const mpe::CacheRef cr = e.cache_ref();
  const std::vector<std::int64_t> tags_before(cr.tags, cr.tags + cr.slots());
  const std::vector<std::uint8_t> dirty_before(cr.dirty, cr.dirty + cr.slots());
  const auto w0 = table_weights(e, 0);  // the other table, its cached rows in FP32
  const std::int64_t lo = e.table_offset(1), hi = e.table_offset(2);
  bool other_dirty = false, this_cached = false;
  for (std::int64_t s = 0; s < cr.slots(); ++s) {
    const auto t = tags_before[static_cast<std::size_t>(s)];
    other_dirty |= t >= 0 && (t < lo || t >= hi) && dirty_before[static_cast<std::size_t>(s)];
    this_cached |= t >= lo && t < hi;
  }
  REQUIRE(other_dirty);  // the case that matters: the other table's dirty lines must survive
  REQUIRE(this_cached);
  // 17 rows of table 1, D = 5: f16 scale, f16 bias, 3 code bytes, padding to 8.
  std::vector<std::uint8_t> rows(17 * 8, 0);
  std::vector<float> expect;
  for (int r = 0; r < 17; ++r) {
    const float scale = 0.125f * static_cast<float>(r % 4);  // exact in f16; 0 = constant row
    const float bias = -1.0f + 0.0625f * static_cast<float>(r);
    const std::uint16_t sh = mpe::num::half_bits_exact(scale), bh = mpe::num::half_bits_exact(bias);
    std::uint8_t* p = rows.data() + r * 8;
    p[0] = static_cast<std::uint8_t>(sh);
    p[1] = static_cast<std::uint8_t>(sh >> 8);
    p[2] = static_cast<std::uint8_t>(bh);
    p[3] = static_cast<std::uint8_t>(bh >> 8);
    for (int i = 0; i < 5; ++i) {
      const unsigned q = static_cast<unsigned>(r * 3 + i * 5) % 16;
      p[4 + i / 2] = static_cast<std::uint8_t>(p[4 + i / 2] | (i % 2 ? q << 4 : q));
      expect.push_back(scale * static_cast<float>(q) + bias);
    }
  }
  mpe::io::import_table(e, 1, mpe::interop::TbeInference{8}, rows);
  CHECK(ckt::same_bits(table_weights(e, 1), expect));
  for (std::int64_t s = 0; s < cr.slots(); ++s) {
    const auto t = tags_before[static_cast<std::size_t>(s)];
    if (t >= lo && t < hi) {
      CHECK(cr.tags[s] == -1);  // the imported table's lines are gone
    } else {
      CHECK(cr.tags[s] == t);  // the others stay, dirty bits too
      CHECK(cr.dirty[s] == dirty_before[static_cast<std::size_t>(s)]);
    }
  }
  CHECK(ckt::same_bits(table_weights(e, 0), w0));
  CHECK(e.step() == step);
  CHECK(e.memory().optimizer_bytes == opt_bytes);
  ckt::train_step(e, 5, mpe::RowwiseAdagrad{0.1f});  // training continues with the same optimizer
  CHECK(e.step() == step + 1);
}

TEST_CASE("Fp16 and Fp32 stores export plain rows equal to the weights") {
  const auto c = io_config(8);
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<4>, mpe::NearestRounding> f32(c);
  mpe::CachedEmbedding<mpe::Fp16, mpe::Lru<4>, mpe::NearestRounding> f16(c);
  f32.set_weights(ramp(47 * 5));
  f16.set_weights(ramp(47 * 5));
  for (std::uint64_t k = 0; k < 3; ++k) {
    ckt::train_step(f32, k, mpe::Sgd{0.1f});
    ckt::train_step(f16, k, mpe::Sgd{0.1f});
  }
  const auto w32 = table_weights(f32, 0);  // FP32 cache rows: the store after flush holds them exactly
  const auto b32 = mpe::io::export_table(f32, 0, mpe::interop::FbgemmFused{});
  std::vector<float> x(w32.size());
  REQUIRE(b32.size() == x.size() * 4);
  std::memcpy(x.data(), b32.data(), b32.size());
  CHECK(ckt::same_bits(x, w32));
  const auto b16 = mpe::io::export_table(f16, 0, mpe::interop::FbgemmFused{});
  REQUIRE(b16.size() == 30 * 5 * 2);
  // Rows not in the cache read exactly the exported halves (cached rows were rounded by flush).
  const auto w16 = table_weights(f16, 0);
  const mpe::CacheRef cr = f16.cache_ref();
  for (std::int64_t r = 0; r < 30; ++r) {
    if (cr.find(r) >= 0) continue;
    for (int i = 0; i < 5; ++i)
      CHECK(f16_at(b16.data() + 2 * (r * 5 + i)) == w16[static_cast<std::size_t>(r * 5 + i)]);
  }
}

TEST_CASE("bad import input throws std::invalid_argument and changes nothing") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  E e(io_config(8));
  e.init_uniform(-1.0f, 1.0f);
  ckt::train_step(e, 0, mpe::Sgd{0.1f});
  const auto before = ckt::snapshot(e);
  std::vector<std::uint8_t> rows(17 * 13, 0);
  CHECK_THROWS_AS(mpe::io::import_table(e, 2, mpe::interop::FbgemmFused{}, rows), std::invalid_argument);
  CHECK_THROWS_AS(mpe::io::export_table(e, -1, mpe::interop::FbgemmFused{}), std::invalid_argument);
  rows.pop_back();
  CHECK_THROWS_AS(mpe::io::import_table(e, 1, mpe::interop::FbgemmFused{}, rows), std::invalid_argument);
  rows.push_back(0);
  const float nan = std::nanf("");
  std::memcpy(rows.data() + 3 * 13 + 5, &nan, 4);  // row 3's scale
  CHECK_THROWS_AS(mpe::io::import_table(e, 1, mpe::interop::FbgemmFused{}, rows), std::invalid_argument);
  CHECK(ckt::snapshot(e) == before);
}

TEST_CASE("issue case: the TBE/TorchRec INT8 export never decodes above the FP16 maximum") {
  mpe::EmbeddingConfig c;
  c.table_rows = {1};
  c.dim = 8;
  mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<4>, mpe::NearestRounding> e(c);
  const std::vector<float> row = {-65504, 65504, 0, 1, -1, 30000, -30000, 65000};
  e.set_weights(row);
  std::vector<float> stored(8);
  e.get_weights(stored);
  const auto tbe = mpe::io::export_table(e, 0, mpe::interop::TbeInference{16});
  const Decoded d = decode(tbe, 1, 8, 8, true, 16);
  const float scale = d.scales[0], bias = f16_at(tbe.data() + 2);
  CHECK(bias + 255.0f * scale <= 65504.0f);  // even the top code reads back within FP16
  for (int i = 0; i < 8; ++i) {
    CAPTURE(i);
    CHECK(d.values[static_cast<std::size_t>(i)] <= 65504.0f);
    CHECK(d.values[static_cast<std::size_t>(i)] >= -65504.0f);
    // within one (stepped-down) scale of mpe's value: the top values clamp to code 255
    CHECK(std::fabs(d.values[static_cast<std::size_t>(i)] - stored[static_cast<std::size_t>(i)]) <= scale);
  }
  // Without the step-down the scale would be 514 and code 255 would read 65566.
  CHECK(scale < 514.0f);
  // A row set within +-65504 can read back one INT8 step above it (65504.0078 here): it
  // exports clamped to 65504; a row farther beyond FP16 is refused.
  const std::vector<float> near = {65504.0f, -65221.9688f, 63183.4922f, 1.0f, 0, 0, 0, 0};
  e.set_weights(near);
  e.get_weights(stored);
  REQUIRE(stored[0] > 65504.0f);
  const auto tbe2 = mpe::io::export_table(e, 0, mpe::interop::TbeInference{16});
  const Decoded d2 = decode(tbe2, 1, 8, 8, true, 16);
  for (int i = 0; i < 8; ++i) {
    CHECK(std::fabs(d2.values[static_cast<std::size_t>(i)]) <= 65504.0f);
    CHECK(std::fabs(d2.values[static_cast<std::size_t>(i)] - stored[static_cast<std::size_t>(i)]) <=
          d2.scales[0]);
  }
  e.set_weights(std::vector<float>{1e5f, 0, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_AS(mpe::io::export_table(e, 0, mpe::interop::TbeInference{16}), std::invalid_argument);
}

TEST_CASE("issue case: FBGEMM's own INT4 rows near the FP16 maximum import saturated and counted") {
  // FloatToFusedNBitRowwiseQuantizedSBHalf of [0, 65504, 0, 0] (D = 4): scale 4368 (f16
  // 0x6C44), bias 0, codes {0, 15, 0, 0}; code 15 decodes to 65520, beyond FP16.
  const std::vector<std::uint8_t> fbgemm = {0xF0, 0x00, 0x44, 0x6C, 0x00, 0x00};
  REQUIRE(f16_at(fbgemm.data() + 2) == 4368.0f);
  mpe::EmbeddingConfig c;
  c.table_rows = {2, 1};
  c.dim = 4;
  c.cache_rows = 4;
  mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lru<4>, mpe::StochasticRounding> e(c);
  std::vector<std::uint8_t> two_rows = fbgemm;
  const std::vector<std::uint8_t> plain = {0x21, 0x43, 0x00,
                                           0x3C, 0x00, 0x00};  // codes 1..4, scale 1, bias 0
  two_rows.insert(two_rows.end(), plain.begin(), plain.end());
  CHECK(mpe::io::import_table(e, 0, mpe::interop::FbgemmFused{}, two_rows) == 1);
  CHECK(e.stats().saturated_rows == 1);
  std::vector<float> w(8);
  e.get_weights(w);
  // Re-quantized from [0, 65504, 0, 0] by Int4Rowwise (round to nearest): the rounded-up
  // scale 4368 would read 65520, so the FP16 just below, 4364, is taken: 15 * 4364 = 65460.
  CHECK(w == std::vector<float>{0, 65460, 0, 0, 1, 2, 3, 4});
  CHECK_NOTHROW(e.set_weights(w));  // what it reads back round-trips
  e.get_weights(w);
  // A row beyond the range by more than one step is still refused, changing nothing.
  const std::vector<std::uint8_t> far = {0xF0, 0x00, 0x00, 0x78, 0x00, 0x00};  // scale 32768: 491520
  std::vector<std::uint8_t> bad = far;
  bad.insert(bad.end(), plain.begin(), plain.end());
  CHECK_THROWS_AS(mpe::io::import_table(e, 0, mpe::interop::FbgemmFused{}, bad), std::invalid_argument);
  std::vector<float> after(8);
  e.get_weights(after);
  CHECK(after == w);
  CHECK(e.stats().saturated_rows == 1);
}

TEST_CASE(
    "Int2Rowwise with dirty cache rows: fused 2-bit and TBE INT2 bytes decode to the store; import "
    "restores") {
  using E = mpe::CachedEmbedding<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>;
  const auto c = io_config(16);
  E a(c);
  a.init_uniform(-1.0f, 1.0f);
  for (std::uint64_t k = 0; k < 8; ++k) ckt::train_step(a, k, mpe::Sgd{0.5f});
  const auto w_a = table_weights(a, 0);  // cached rows: FP32 values
  const std::uint64_t wb = a.stats().writebacks;
  const auto fused = mpe::io::export_table(a, 0, mpe::interop::FbgemmFused{});
  CHECK(a.stats().writebacks > wb);                         // the export flushed dirty rows
  const Decoded d = decode(fused, 30, 5, 2, false, 2 + 4);  // ceil(5/4) code bytes + f16 scale, bias
  for (std::size_t i = 0; i < w_a.size(); ++i) {
    // a flushed row rounds each value stochastically to one of its two neighbouring grid
    // points: within one quantization step (scale) of the FP32 value
    CHECK(std::fabs(d.values[i] - w_a[i]) <= d.scales[i / 5] * (1.0f + 1e-3f));
  }
  for (std::int64_t r = 0; r < 30; ++r)
    CHECK((fused[static_cast<std::size_t>(r) * 6 + 1] >> 2) == 0);  // unused bits
  const auto tbe = mpe::io::export_table(a, 0, mpe::interop::TbeInference{16});
  const Decoded t = decode(tbe, 30, 5, 2, true, 16);  // 4 + 2 bytes padded to 16
  CHECK(ckt::same_bits(t.values, d.values));          // the same codes and f16 parameters, moved

  E b(c);
  mpe::io::import_table(b, 0, mpe::interop::FbgemmFused{}, fused);
  CHECK(ckt::same_bits(table_weights(b, 0), d.values));
  E b2(c);
  mpe::io::import_table(b2, 0, mpe::interop::TbeInference{16}, tbe);
  CHECK(ckt::same_bits(table_weights(b2, 0), d.values));

  // hand-encoded TBE INT2 rows of table 1: f16 scale, f16 bias, 2 code bytes, padding to 8
  std::vector<std::uint8_t> rows(17 * 8, 0);
  std::vector<float> expect;
  for (int r = 0; r < 17; ++r) {
    const float scale = 0.25f * static_cast<float>(r % 4);  // exact in f16; 0 = constant row
    const float bias = -1.0f + 0.0625f * static_cast<float>(r);
    const std::uint16_t sh = mpe::num::half_bits_exact(scale), bh = mpe::num::half_bits_exact(bias);
    std::uint8_t* p = rows.data() + r * 8;
    p[0] = static_cast<std::uint8_t>(sh);
    p[1] = static_cast<std::uint8_t>(sh >> 8);
    p[2] = static_cast<std::uint8_t>(bh);
    p[3] = static_cast<std::uint8_t>(bh >> 8);
    for (int i = 0; i < 5; ++i) {
      const unsigned q = static_cast<unsigned>(r * 3 + i * 5) % 4;
      p[4 + i / 4] = static_cast<std::uint8_t>(p[4 + i / 4] | q << (2 * (i % 4)));
      expect.push_back(scale * static_cast<float>(q) + bias);
    }
  }
  mpe::io::import_table(b, 1, mpe::interop::TbeInference{8}, rows);
  CHECK(ckt::same_bits(table_weights(b, 1), expect));
  ckt::train_step(b, 9, mpe::RowwiseAdagrad{0.1f});  // training continues
}

TEST_CASE("issue case: FBGEMM's own INT2 rows near the FP16 maximum import saturated and counted") {
  // FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef, bit_rate 2, of [0, 65504, 0, 0]: bias 0,
  // scale = nearest FP16 of 65504 / 3 = 21840 (0x7555), codes {0, 3, 0, 0} (one byte, 0x0C);
  // code 3 decodes to 65520, beyond FP16.
  const std::vector<std::uint8_t> fbgemm = {0x0C, 0x55, 0x75, 0x00, 0x00};
  REQUIRE(f16_at(fbgemm.data() + 1) == 21840.0f);
  mpe::EmbeddingConfig c;
  c.table_rows = {2, 1};
  c.dim = 4;
  c.cache_rows = 4;
  mpe::CachedEmbedding<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding> e(c);
  std::vector<std::uint8_t> two_rows = fbgemm;
  const std::vector<std::uint8_t> plain = {0xE4, 0x00, 0x3C, 0x00, 0x00};  // codes 0..3, scale 1, bias 0
  two_rows.insert(two_rows.end(), plain.begin(), plain.end());
  CHECK(mpe::io::import_table(e, 0, mpe::interop::FbgemmFused{}, two_rows) == 1);
  CHECK(e.stats().saturated_rows == 1);
  std::vector<float> w(8);
  e.get_weights(w);
  // Re-quantized from [0, 65504, 0, 0] by Int2Rowwise (round to nearest): the rounded-up
  // scale 21840 would read 65520, so the FP16 just below, 21824, is taken: 3 * 21824 = 65472.
  CHECK(w == std::vector<float>{0, 65472, 0, 0, 0, 1, 2, 3});
  CHECK_NOTHROW(e.set_weights(w));  // what it reads back round-trips
  // A row beyond the range by more than one step is still refused, changing nothing.
  std::vector<std::uint8_t> bad = {0x0C, 0x00, 0x78, 0x00, 0x00};  // scale 32768: 98304
  bad.insert(bad.end(), plain.begin(), plain.end());
  std::vector<float> before(8);
  e.get_weights(before);
  CHECK_THROWS_AS(mpe::io::import_table(e, 0, mpe::interop::FbgemmFused{}, bad), std::invalid_argument);
  std::vector<float> after(8);
  e.get_weights(after);
  CHECK(after == before);
}
