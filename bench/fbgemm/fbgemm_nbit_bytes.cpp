// SPDX-License-Identifier: Apache-2.0
// fbgemm_nbit_bytes: mpe's Int4Rowwise and Int2Rowwise rows against FBGEMM's own fused
// N-bit row-wise quantizer and dequantizer (FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf,
// FusedNBitRowwiseQuantizedSBHalfToFloatOrHalf, bit_rate 4 and 2, and their Ref versions),
// linked from a prebuilt FBGEMM CPU library (bench/fbgemm/CMakeLists.txt). Checks, for
// D in {4, 8, 16, 64, 128} (FBGEMM's optimized ops need a multiple of 8 / N) and random rows:
//   1. FBGEMM's bytes imported by mpe::interop (FbgemmFused) read back, through mpe's
//      Reader, the values FBGEMM's Ref dequantizer gives (scale * q + bias), and export
//      back to the same bytes;
//   2. mpe's stored rows, exported, dequantize in FBGEMM to mpe's values;
//   3. rows on an exact grid (FP16 bias and scale, every code present) quantize to the
//      same bytes in mpe (nearest and stochastic) and in FBGEMM (Ref and optimized).
// The quantizers differ off the grid (mpe rounds the bias down and the scale up to FP16,
// FBGEMM to nearest), so only case 3 compares quantizer bytes. Prints one line per
// bit rate and exits 1 on any mismatch.
#include <fbgemm/QuantUtils.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mpe/io/interop.hpp>
#include <random>
#include <type_traits>
#include <vector>

namespace {

template <class S>
int check(std::mt19937& gen) {
  constexpr int bits = S::bits;
  constexpr int qmax = (1 << bits) - 1;
  const mpe::interop::FbgemmFused layout{};
  long mismatches = 0, rows_checked = 0;
  for (const int D : {4, 8, 16, 64, 128}) {
    const std::size_t eb = mpe::interop::external_row_bytes<S>(layout, D);
    const std::size_t sb = mpe::row_bytes<S>(D, 4);
    const int rows = 64;
    std::vector<float> x(static_cast<std::size_t>(rows) * D);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    for (auto& v : x) v = u(gen);
    // 1. FBGEMM -> mpe (optimized and Ref quantizer)
    for (const bool ref : {false, true}) {
      std::vector<std::uint8_t> fb(rows * eb);
      if (ref) {
        fbgemm::FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef<float>(bits, x.data(), rows, D, fb.data());
      } else {
        fbgemm::FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf<float>(bits, x.data(), rows, D, fb.data());
      }
      std::vector<float> fv(static_cast<std::size_t>(rows) * D);
      fbgemm::FusedNBitRowwiseQuantizedSBHalfToFloatOrHalfRef<float>(bits, fb.data(), rows,
                                                                     static_cast<int>(eb), fv.data());
      std::vector<std::uint8_t> store(rows * sb);
      mpe::interop::import_table<S>(layout, fb, rows, D, 4, store);
      for (int r = 0; r < rows; ++r) {
        const typename S::Reader rd(store.data() + r * sb, D);
        for (int d = 0; d < D; ++d) {
          const float a = rd[d], b = fv[static_cast<std::size_t>(r) * D + d];
          mismatches += std::memcmp(&a, &b, 4) != 0;
        }
      }
      std::vector<std::uint8_t> back(rows * eb);
      mpe::interop::export_table<S>(layout, store, rows, D, 4, back);
      mismatches += back != fb;
      rows_checked += rows;
    }
    // 2. mpe -> FBGEMM
    std::vector<std::uint8_t> store(rows * sb);
    for (int r = 0; r < rows; ++r) {
      S::template store<mpe::StochasticRounding>(
          x.data() + static_cast<std::size_t>(r) * D, D, store.data() + r * sb,
          {5, static_cast<std::uint64_t>(r), 0, mpe::num::RoundingSite::SetWeights});
    }
    std::vector<std::uint8_t> ext(rows * eb);
    mpe::interop::export_table<S>(layout, store, rows, D, 4, ext);
    std::vector<float> fv(static_cast<std::size_t>(rows) * D);
    fbgemm::FusedNBitRowwiseQuantizedSBHalfToFloatOrHalfRef<float>(bits, ext.data(), rows,
                                                                   static_cast<int>(eb), fv.data());
    for (int r = 0; r < rows; ++r) {
      const typename S::Reader rd(store.data() + r * sb, D);
      for (int d = 0; d < D; ++d) {
        const float a = rd[d], b = fv[static_cast<std::size_t>(r) * D + d];
        mismatches += std::memcmp(&a, &b, 4) != 0;
      }
    }
    rows_checked += rows;
    // 3. grid rows: bias b and scale s exact in FP16 (and s * qmax exact), codes a
    //    permutation-like pattern holding 0 and qmax
    for (int r = 0; r < rows; ++r) {
      const float s = static_cast<float>(1 + r % 7) * 0.125f,
                  b = -1.0f + 0.0625f * static_cast<float>(r % 11);
      std::vector<float> g(static_cast<std::size_t>(D));
      for (int d = 0; d < D; ++d) {
        const int q = d == 0 ? 0 : (d == 1 ? qmax : static_cast<int>(gen() % (qmax + 1)));
        g[static_cast<std::size_t>(d)] = b + s * static_cast<float>(q);
      }
      std::vector<std::uint8_t> f1(eb), f2(eb), m1(sb), m2(sb);
      fbgemm::FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef<float>(bits, g.data(), 1, D, f1.data());
      fbgemm::FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf<float>(bits, g.data(), 1, D, f2.data());
      const mpe::num::RowRng rng{7, static_cast<std::uint64_t>(r), 1, mpe::num::RoundingSite::StoreUpdate};
      S::template store<mpe::NearestRounding>(g.data(), D, m1.data(), rng);
      S::template store<mpe::StochasticRounding>(g.data(), D, m2.data(), rng);
      mismatches += std::memcmp(f1.data(), m1.data(), eb) != 0;
      mismatches += std::memcmp(f2.data(), m1.data(), eb) != 0;
      mismatches += std::memcmp(f1.data(), m2.data(), eb) != 0;
      ++rows_checked;
    }
  }
  std::printf("%s (bit_rate %d): %ld rows checked, %ld mismatches\n", S::name, bits, rows_checked,
              mismatches);
  return mismatches == 0 ? 0 : 1;
}

}  // namespace

int main() {
  std::mt19937 gen(39);
  const int bad = check<mpe::Int4Rowwise>(gen) + check<mpe::Int2Rowwise>(gen);
  std::printf("%s\n", bad ? "FAILED" : "all equal");
  return bad ? 1 : 0;
}
