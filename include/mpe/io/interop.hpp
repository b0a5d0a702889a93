// SPDX-License-Identifier: Apache-2.0
/// @file mpe/io/interop.hpp
/// @brief Import from and export to FBGEMM's and TorchRec's row layouts, per row and per
/// table (host memory, synchronous).
///
/// Two external layouts:
///
/// - `FbgemmFused`: FBGEMM's fused row-wise layouts, the ones `Int8Rowwise`,
///   `Int4Rowwise` and `Int2Rowwise` store natively.
///   * 8-bit (`torch.ops.fbgemm.FloatToFused8BitRowwiseQuantized`, FBGEMM
///     `FloatOrHalfToFused8BitRowwiseQuantizedSBFloat`): D x u8 codes, then f32 scale, then
///     f32 bias. The CPU op writes D + 8 bytes; fbgemm_gpu's CUDA op pads the codes to a
///     multiple of 4 (`ncols_aligned = (ncols + 3) / 4 * 4`, quantize_fused_8bit_rowwise.cu),
///     selected here by `code_alignment = 4`.
///   * N-bit, N = 4 (`FloatToFusedNBitRowwiseQuantizedSBHalf`): ceil(D/2) bytes, element 2i
///     in the low nibble of byte i, 2i+1 in the high nibble, then f16 scale, then f16 bias.
///   * N-bit, N = 2 (the same op with bit_rate 2; FBGEMM src/QuantUtils.cc
///     `FloatOrHalfToFusedNBitRowwiseQuantizedSBHalfRef` writes column c into byte c / 4 at
///     bit (c % 4) * 2): ceil(D/4) bytes, element 4i+k in bits 2k..2k+1 of byte i, then f16
///     scale, then f16 bias.
///   * Fp32 / Fp16 / Bf16: plain D x element, no parameters.
/// - `TbeInference`: the weights of FBGEMM's `IntNBitTableBatchedEmbeddingBagsCodegen`
///   (fbgemm_gpu/split_table_batched_embeddings_ops_inference.py), which is also what
///   TorchRec's quantized EmbeddingBagCollection holds (torchrec/quant/embedding_modules.py
///   `quantize_state_dict` and torchrec/distributed/quant_embedding_kernel.py
///   `_quantize_weight` quantize with `FloatOrHalfToFusedNBitRowwiseQuantizedSBHalf` for INT8
///   too, split off the 4-byte scale/shift and hand both to the TBE). Per row:
///   f16 scale, f16 bias (`DEFAULT_SCALE_BIAS_SIZE_IN_BYTES = 4`, "GPU and CPU use 16-bit
///   scale and bias" — for INT8 as well), then the codes (INT8: D bytes; INT4, INT2 (the
///   TBE's `SparseType.INT2`): as above);
///   `reverse_qparam = True` puts the 4 bytes after the codes instead (`scale_bias_last`).
///   Each row is padded to `row_alignment` bytes (`rounded_row_size_in_bytes`; the TBE
///   default is 16 on CUDA and 1 on CPU). FP16/FP32 rows are plain, padded likewise. The TBE
///   asserts an even D for INT4 (a multiple of 4 for INT2: `unpadded_row_size_in_bytes` is
///   dim / 4 + 4); other D are accepted here with ceil(D/2) (ceil(D/4)) code bytes, as the
///   fused N-bit op's reference writes them.
///
/// Conversions are exact (a byte move) except `Int8Rowwise` exported to `TbeInference`:
/// mpe's f32 scale/bias do not fit f16, so the row's dequantized values x are re-quantized
/// to round-to-nearest codes with f16 parameters the way `Int4Rowwise` does it (bias = min x
/// rounded down to FP16, scale = (max x - bias) / 255 rounded up to FP16); each value then
/// differs from mpe's by at most half the new scale (plus float rounding), and a constant
/// row stores scale 0 and bias = the nearest FP16. Importing TBE INT8 rows into
/// `Int8Rowwise` is exact (f16 -> f32 is exact).
///
/// Import validates every row before it writes anything: a row encoding a value the
/// storage format cannot hold (non-finite parameters or elements, or beyond the format's
/// `limit` by more than the row's scale) throws `std::invalid_argument` naming the row and
/// value, and the destination is left unchanged. **Saturation rule**: a quantized row whose
/// elements decode finite but beyond `limit` by at most the row's scale (one quantization
/// step) is imported saturated — re-quantized by the store's own quantizer with
/// round-to-nearest from its decoded values clamped to +-limit — and counted (the import
/// functions return the number of such rows). FBGEMM's own quantizers produce such rows for
/// values near +-65504: they round the FP16 scale up, so `FloatToFusedNBitRowwiseQuantizedSBHalf`
/// of [0, 65504, 0, 0] stores scale 4368 and code 15, which decodes to 65520.
///
/// Export from an Int8Rowwise row with values beyond FP16 (to the TBE's f16 parameters) by
/// more than the row's quantization step throws likewise; within one step (a row set to
/// +-65504 can read back one rounding above it) the values are clamped to +-65504.
/// The TBE INT8 re-quantization keeps every code within FP16 as `Int4Rowwise` does: where
/// bias + 255 * scale would read back above 65504, the FP16 scale just below is taken (the
/// top values then clamp to code 255, still within one scale). Padding bytes are written as
/// zeros.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mpe/numeric/half.hpp"
#include "mpe/storage/all.hpp"

namespace mpe::interop {

/// FBGEMM's fused row-wise layout: codes, then scale and bias (see the file comment).
struct FbgemmFused {
  /// Int8Rowwise only: the codes are padded to a multiple of this (1 = FBGEMM CPU op,
  /// D + 8 bytes; 4 = fbgemm_gpu CUDA op). A power of two.
  std::int32_t code_alignment = 1;
};

/// FBGEMM TBE inference / TorchRec quantized rows: f16 scale, f16 bias, codes, padding.
struct TbeInference {
  /// Row padding in bytes (`row_alignment` of IntNBitTableBatchedEmbeddingBagsCodegen:
  /// 16 on CUDA, 1 on CPU by default). A power of two.
  std::int32_t row_alignment = 16;
  /// The TBE's `reverse_qparam`: scale and bias after the codes instead of before.
  bool scale_bias_last = false;
};

namespace detail {

inline void check_pow2(const char* name, std::int32_t a) {
  if (a < 1 || (a & (a - 1)) != 0) {
    throw std::invalid_argument(std::string("mpe::interop: ") + name + " must be a power of two >= 1, got " +
                                std::to_string(a));
  }
}

inline void check_dim(std::int32_t dim) {
  if (dim < 1) throw std::invalid_argument("mpe::interop: dim must be >= 1, got " + std::to_string(dim));
}

inline void check_size(const char* name, std::size_t got, std::size_t want) {
  if (got != want) {
    throw std::invalid_argument(std::string("mpe::interop: ") + name + " has " + std::to_string(got) +
                                " bytes, expected " + std::to_string(want));
  }
}

inline std::size_t round_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

template <class S>
inline constexpr bool is_plain_v =
    std::is_same_v<S, Fp32> || std::is_same_v<S, Fp16> || std::is_same_v<S, Bf16>;
template <class S>
inline constexpr bool is_nbit_v = std::is_same_v<S, Int4Rowwise> || std::is_same_v<S, Int2Rowwise>;
template <class S>
inline constexpr bool is_quantized_v = std::is_same_v<S, Int8Rowwise> || is_nbit_v<S>;

/// Code of element d in a quantized row's code bytes: a byte (Int8Rowwise), or FBGEMM's
/// fused N-bit packing, element d in bits (d mod (8/N)) * N of byte d / (8/N) (Int4Rowwise:
/// element 2i in the low nibble of byte i; Int2Rowwise: element 4i+k in bits 2k..2k+1).
template <class S>
unsigned code_at(const std::uint8_t* codes, std::int32_t d) {
  if constexpr (std::is_same_v<S, Int8Rowwise>) {
    return codes[d];
  } else {
    constexpr int per_byte = 8 / S::bits;
    return static_cast<unsigned>(codes[d / per_byte] >> ((d % per_byte) * S::bits)) & ((1u << S::bits) - 1);
  }
}

/// Zeroes the unused high code bits of the last code byte of an N-bit row (D not a multiple
/// of 8 / N): mpe's stores keep them 0.
template <class S>
void clear_unused_code_bits(std::uint8_t* codes, std::int32_t dim) {
  if constexpr (is_nbit_v<S>) {
    constexpr int per_byte = 8 / S::bits;
    if (const int used = dim % per_byte; used != 0) {
      codes[dim / per_byte] =
          static_cast<std::uint8_t>(codes[dim / per_byte] & ((1u << (used * S::bits)) - 1));
    }
  }
}

[[noreturn]] inline void bad_value(std::int64_t row, const char* what, double value, const char* fmt) {
  throw std::invalid_argument("mpe::interop: row " + std::to_string(row) + " holds " + what + " " +
                              std::to_string(value) + ", which " + fmt + " cannot hold");
}

/// Checks a quantized row (Int8Rowwise: one code byte per element; Int4Rowwise and
/// Int2Rowwise: FBGEMM's N-bit packing, code_at): finite scale and bias, and every element, decoded exactly
/// as the store's Reader does (add(mul(scale, q), bias)), finite and within S::limit, or
/// beyond it by at most |scale| (then the row is to be saturated: returns true). The codes
/// the row holds decide, not the header's full range: FBGEMM writes scale 1 for a constant
/// row, whose unused top code may lie beyond the range.
template <class S>
bool check_quantized(std::int64_t row, const std::uint8_t* codes, std::int32_t dim, float scale, float bias) {
  if (!num::is_finite(scale)) bad_value(row, "scale", scale, S::name);
  if (!num::is_finite(bias)) bad_value(row, "bias", bias, S::name);
  bool saturate = false;
  for (std::int32_t d = 0; d < dim; ++d) {
    const unsigned q = code_at<S>(codes, d);
    const float x = num::add(num::mul(scale, static_cast<float>(q)), bias);
    if (!num::is_finite(x) || (std::fabs(x) > S::limit && std::fabs(x) - S::limit > std::fabs(scale))) {
      bad_value(row, ("element " + std::to_string(d) + " =").c_str(), x, S::name);
    }
    saturate = saturate || std::fabs(x) > S::limit;
  }
  return saturate;
}

/// Saturates an imported store row (the saturation rule in the file comment): decodes it,
/// clamps to +-S::limit and re-quantizes with round-to-nearest.
template <class S>
void saturate_row(std::uint8_t* mpe_row, std::int32_t dim) {
  std::vector<float> x(static_cast<std::size_t>(dim));
  const typename S::Reader rd(mpe_row, dim);
  for (std::int32_t d = 0; d < dim; ++d) {
    const float v = rd[d];
    x[static_cast<std::size_t>(d)] = v > S::limit ? S::limit : (v < -S::limit ? -S::limit : v);
  }
  const num::RowRng unused{0, 0, 0, num::RoundingSite::SetWeights};
  S::template store<NearestRounding>(x.data(), dim, mpe_row, unused);
}

/// Checks the elements of a plain row (Fp32 / Fp16 / Bf16 bytes) decode to values S holds.
template <class S>
void check_plain(std::int64_t row, const std::uint8_t* p, std::int32_t dim) {
  for (std::int32_t d = 0; d < dim; ++d) {
    float x;
    if constexpr (std::is_same_v<S, Fp32>) {
      x = num::load_f32(p + 4 * d);
    } else if constexpr (std::is_same_v<S, Fp16>) {
      x = num::half_to_float(num::load_u16(p + 2 * d));
    } else {
      x = num::bf16_to_float(num::load_u16(p + 2 * d));
    }
    if (!num::is_finite(x) || std::fabs(x) > S::limit) bad_value(row, "element", x, S::name);
  }
}

// ---- byte offsets of the parts of one external row ----
template <class S>
std::size_t codes_bytes(std::int32_t dim) {
  constexpr std::size_t per_byte = 8 / S::bits;  // 1 (Int8Rowwise), 2 (Int4Rowwise), 4 (Int2Rowwise)
  return (static_cast<std::size_t>(dim) + per_byte - 1) / per_byte;
}

}  // namespace detail

/// Bytes of one row of `S` in FBGEMM's fused layout (no row padding).
/// @throws std::invalid_argument for dim < 1 or a bad code_alignment.
template <StoragePolicy S>
std::size_t external_row_bytes(const FbgemmFused& layout, std::int32_t dim) {
  static_assert(detail::is_plain_v<S> || detail::is_quantized_v<S>, "mpe::interop: unsupported storage");
  detail::check_dim(dim);
  detail::check_pow2("code_alignment", layout.code_alignment);
  if constexpr (std::is_same_v<S, Int8Rowwise>) {
    return detail::round_up(static_cast<std::size_t>(dim), static_cast<std::size_t>(layout.code_alignment)) +
           8;
  } else {
    return S::data_bytes(dim);
  }
}

/// Bytes of one row of `S` in the TBE-inference / TorchRec layout, padding included
/// (FBGEMM's `rounded_row_size_in_bytes`). Bf16 has no TBE-inference type.
/// @throws std::invalid_argument for dim < 1 or a bad row_alignment.
template <StoragePolicy S>
std::size_t external_row_bytes(const TbeInference& layout, std::int32_t dim) {
  static_assert(std::is_same_v<S, Fp32> || std::is_same_v<S, Fp16> || detail::is_quantized_v<S>,
                "mpe::interop: the TBE inference layout has FP32, FP16, INT8, INT4 and INT2 rows only");
  detail::check_dim(dim);
  detail::check_pow2("row_alignment", layout.row_alignment);
  std::size_t r;
  if constexpr (detail::is_quantized_v<S>) {
    r = detail::codes_bytes<S>(dim) + 4;
  } else {
    r = S::data_bytes(dim);
  }
  return detail::round_up(r, static_cast<std::size_t>(layout.row_alignment));
}

namespace detail {

// ---- one row, sizes already checked; `row` is the global row for messages ----

template <class S>
void export_one(const FbgemmFused& layout, const std::uint8_t* in, std::int32_t dim, std::uint8_t* out,
                std::size_t out_bytes, std::int64_t /*row*/) {
  std::memset(out, 0, out_bytes);
  if constexpr (std::is_same_v<S, Int8Rowwise>) {
    const std::size_t cb =
        round_up(static_cast<std::size_t>(dim), static_cast<std::size_t>(layout.code_alignment));
    std::memcpy(out, in, static_cast<std::size_t>(dim));
    std::memcpy(out + cb, in + dim, 8);
  } else {
    std::memcpy(out, in, S::data_bytes(dim));  // Int4Rowwise, Int2Rowwise and plain rows: the same bytes
  }
}

/// Validates one external row; returns true when it is to be imported saturated.
template <class S>
bool check_import(const FbgemmFused& layout, const std::uint8_t* in, std::int32_t dim, std::int64_t row) {
  if constexpr (std::is_same_v<S, Int8Rowwise>) {
    const std::size_t cb =
        round_up(static_cast<std::size_t>(dim), static_cast<std::size_t>(layout.code_alignment));
    return check_quantized<S>(row, in, dim, num::load_f32(in + cb), num::load_f32(in + cb + 4));
  } else if constexpr (is_nbit_v<S>) {
    const std::size_t nb = codes_bytes<S>(dim);
    return check_quantized<S>(row, in, dim, num::half_to_float(num::load_u16(in + nb)),
                              num::half_to_float(num::load_u16(in + nb + 2)));
  } else {
    check_plain<S>(row, in, dim);
    return false;
  }
}

template <class S>
void import_one(const FbgemmFused& layout, const std::uint8_t* in, std::int32_t dim, std::uint8_t* out,
                std::size_t out_bytes) {
  std::memset(out, 0, out_bytes);
  if constexpr (std::is_same_v<S, Int8Rowwise>) {
    const std::size_t cb =
        round_up(static_cast<std::size_t>(dim), static_cast<std::size_t>(layout.code_alignment));
    std::memcpy(out, in, static_cast<std::size_t>(dim));
    std::memcpy(out + dim, in + cb, 8);
  } else {
    std::memcpy(out, in, S::data_bytes(dim));
    clear_unused_code_bits<S>(out, dim);  // N-bit rows: the unused high bits of the last byte
  }
}

/// Throws unless every value of an Int8Rowwise row is within FP16's range, or beyond it by
/// at most the row's own quantization step (an INT8 row set to +-65504 can read back one
/// rounding above it); such values are clamped to +-65504 by the export.
inline void check_int8_fits_fp16(const Int8Rowwise::Reader& r, std::int32_t dim, std::int64_t row) {
  const float step = std::fabs(r.scale);
  for (std::int32_t d = 0; d < dim; ++d) {
    const float x = r[d];
    if (!(std::fabs(x) <= num::kHalfMax) && !(std::fabs(x) - num::kHalfMax <= step)) {
      bad_value(row, ("element " + std::to_string(d) + " =").c_str(), x,
                "FP16 (the TBE's scale and bias; more than one quantization step beyond 65504)");
    }
  }
}

/// Int8Rowwise row -> TBE INT8 codes with f16 scale/bias (nearest re-quantization of the
/// dequantized values, clamped to +-65504; see the file comment).
inline void requantize_int8_fp16(const std::uint8_t* in, std::int32_t dim, std::uint8_t* codes,
                                 std::uint16_t& scale_h, std::uint16_t& bias_h, std::int64_t row) {
  const Int8Rowwise::Reader r(in, dim);
  check_int8_fits_fp16(r, dim, row);
  const auto value = [&r](std::int32_t d) {
    const float x = r[d];
    return x > num::kHalfMax ? num::kHalfMax : (x < -num::kHalfMax ? -num::kHalfMax : x);
  };
  float mn = value(0), mx = value(0);
  for (std::int32_t d = 1; d < dim; ++d) {
    const float x = value(d);
    mn = x < mn ? x : mn;
    mx = x > mx ? x : mx;
  }
  scale_h = 0;
  if (mx == mn) {
    bias_h = num::float_to_half<NearestRounding>(mn).bits;
    std::memset(codes, 0, static_cast<std::size_t>(dim));
    return;
  }
  // The fused N-bit rule with N = 8 (FP16 bias rounded down, scale rounded up, the top
  // code kept within FP16), shared with Int4Rowwise::store.
  const mpe::detail::FusedNbitScale p = mpe::detail::fused_nbit_scale<8>(mn, mx, num::kHalfMax);
  bias_h = p.bias_h;
  scale_h = p.scale_h;
  const float bias = p.bias, inv = p.inv;
  for (std::int32_t d = 0; d < dim; ++d) {
    float q = num::rint_even(num::mul(num::sub(value(d), bias), inv));
    q = q < 0.0f ? 0.0f : (q > 255.0f ? 255.0f : q);
    codes[d] = static_cast<std::uint8_t>(q);
  }
}

template <class S>
void export_one(const TbeInference& layout, const std::uint8_t* in, std::int32_t dim, std::uint8_t* out,
                std::size_t out_bytes, std::int64_t row) {
  std::memset(out, 0, out_bytes);
  if constexpr (is_quantized_v<S>) {
    const std::size_t cb = codes_bytes<S>(dim);
    std::uint8_t* codes = layout.scale_bias_last ? out : out + 4;
    std::uint8_t* qp = layout.scale_bias_last ? out + cb : out;
    if constexpr (std::is_same_v<S, Int8Rowwise>) {
      std::uint16_t s, b;
      requantize_int8_fp16(in, dim, codes, s, b, row);
      num::store_u16(qp, s);
      num::store_u16(qp + 2, b);
    } else {
      std::memcpy(codes, in, cb);
      std::memcpy(qp, in + cb, 4);
    }
  } else {
    std::memcpy(out, in, S::data_bytes(dim));
  }
}

template <class S>
bool check_import(const TbeInference& layout, const std::uint8_t* in, std::int32_t dim, std::int64_t row) {
  if constexpr (is_quantized_v<S>) {
    const std::uint8_t* qp = layout.scale_bias_last ? in + codes_bytes<S>(dim) : in;
    const std::uint8_t* codes = layout.scale_bias_last ? in : in + 4;
    return check_quantized<S>(row, codes, dim, num::half_to_float(num::load_u16(qp)),
                              num::half_to_float(num::load_u16(qp + 2)));
  } else {
    check_plain<S>(row, in, dim);
    return false;
  }
}

template <class S>
void import_one(const TbeInference& layout, const std::uint8_t* in, std::int32_t dim, std::uint8_t* out,
                std::size_t out_bytes) {
  std::memset(out, 0, out_bytes);
  if constexpr (is_quantized_v<S>) {
    const std::size_t cb = codes_bytes<S>(dim);
    const std::uint8_t* codes = layout.scale_bias_last ? in : in + 4;
    const std::uint8_t* qp = layout.scale_bias_last ? in + cb : in;
    std::memcpy(out, codes, cb);
    if constexpr (std::is_same_v<S, Int8Rowwise>) {
      num::store_f32(out + cb, num::half_to_float(num::load_u16(qp)));
      num::store_f32(out + cb + 4, num::half_to_float(num::load_u16(qp + 2)));
    } else {
      std::memcpy(out + cb, qp, 4);
      clear_unused_code_bits<S>(out, dim);
    }
  } else {
    std::memcpy(out, in, S::data_bytes(dim));
  }
}

}  // namespace detail

/// Export one mpe store row of format `S` to an external layout.
/// @param layout  the external layout, FbgemmFused or TbeInference, with its options.
/// @param mpe_row one store row, `row_bytes<S>(dim, row_alignment)` bytes (mpe's padding).
/// @param dim     D, elements per row (>= 1).
/// @param row_alignment mpe's store row padding in bytes, a power of two (as
///                EmbeddingConfig::row_alignment; TbeInference::row_alignment pads the
///                external rows).
/// @param out     `external_row_bytes<S>(layout, dim)` bytes; padding is zeroed.
/// @throws std::invalid_argument on a wrong span size, dim < 1, a bad alignment, or (TBE
///         INT8) a row value beyond FP16; `out` is then unchanged.
template <StoragePolicy S, class Layout>
void export_row(const Layout& layout, std::span<const std::uint8_t> mpe_row, std::int32_t dim,
                std::int32_t row_alignment, std::span<std::uint8_t> out) {
  const std::size_t eb = external_row_bytes<S>(layout, dim);
  detail::check_pow2("row_alignment", row_alignment);
  detail::check_size("mpe_row", mpe_row.size(), row_bytes<S>(dim, row_alignment));
  detail::check_size("out", out.size(), eb);
  if constexpr (std::is_same_v<Layout, TbeInference> && std::is_same_v<S, Int8Rowwise>) {
    // re-quantization may throw: build the row aside so `out` stays unchanged
    std::vector<std::uint8_t> tmp(eb);
    detail::export_one<S>(layout, mpe_row.data(), dim, tmp.data(), eb, 0);
    std::memcpy(out.data(), tmp.data(), eb);
  } else {
    detail::export_one<S>(layout, mpe_row.data(), dim, out.data(), eb, 0);
  }
}

/// Import one external row into an mpe store row of format `S`.
/// @param layout  the external layout, FbgemmFused or TbeInference, with its options.
/// @param in      `external_row_bytes<S>(layout, dim)` bytes.
/// @param dim     D, elements per row (>= 1).
/// @param row_alignment mpe's store row padding in bytes, a power of two (as
///                EmbeddingConfig::row_alignment; TbeInference::row_alignment pads the
///                external rows).
/// @param mpe_row `row_bytes<S>(dim, row_alignment)` bytes; mpe's padding is zeroed.
/// @return true when the row was saturated (the saturation rule in the file comment).
/// @throws std::invalid_argument on a wrong span size, dim < 1, a bad alignment, or a row
///         encoding a value `S` cannot hold; `mpe_row` is then unchanged.
template <StoragePolicy S, class Layout>
bool import_row(const Layout& layout, std::span<const std::uint8_t> in, std::int32_t dim,
                std::int32_t row_alignment, std::span<std::uint8_t> mpe_row) {
  const std::size_t eb = external_row_bytes<S>(layout, dim);
  detail::check_pow2("row_alignment", row_alignment);
  detail::check_size("in", in.size(), eb);
  detail::check_size("mpe_row", mpe_row.size(), row_bytes<S>(dim, row_alignment));
  const bool saturate = detail::check_import<S>(layout, in.data(), dim, 0);
  detail::import_one<S>(layout, in.data(), dim, mpe_row.data(), mpe_row.size());
  if (saturate) detail::saturate_row<S>(mpe_row.data(), dim);
  return saturate;
}

/// Export a whole table: `rows` consecutive mpe store rows -> `rows` external rows.
/// @param layout  the external layout, FbgemmFused or TbeInference, with its options.
/// @param store   (rows, row_bytes<S>(dim, row_alignment)) bytes, row-major.
/// @param rows    number of rows (>= 0; negative throws std::invalid_argument).
/// @param dim     D, elements per row (>= 1).
/// @param row_alignment mpe's store row padding in bytes, a power of two (as
///                EmbeddingConfig::row_alignment; TbeInference::row_alignment pads the
///                external rows).
/// @param out     (rows, external_row_bytes<S>(layout, dim)) bytes, row-major.
/// @throws std::invalid_argument as export_row (naming the row); `out` is then unchanged
///         for the TBE INT8 re-quantization check, which runs on every row first.
template <StoragePolicy S, class Layout>
void export_table(const Layout& layout, std::span<const std::uint8_t> store, std::int64_t rows,
                  std::int32_t dim, std::int32_t row_alignment, std::span<std::uint8_t> out) {
  if (rows < 0) throw std::invalid_argument("mpe::interop: rows must be >= 0, got " + std::to_string(rows));
  const std::size_t eb = external_row_bytes<S>(layout, dim);
  detail::check_pow2("row_alignment", row_alignment);
  const std::size_t sb = row_bytes<S>(dim, row_alignment);
  detail::check_size("store", store.size(), static_cast<std::size_t>(rows) * sb);
  detail::check_size("out", out.size(), static_cast<std::size_t>(rows) * eb);
  if constexpr (std::is_same_v<Layout, TbeInference> && std::is_same_v<S, Int8Rowwise>) {
    for (std::int64_t r = 0; r < rows; ++r) {  // validate first: FP16 parameters must hold every value
      detail::check_int8_fits_fp16(Int8Rowwise::Reader(store.data() + r * sb, dim), dim, r);
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    detail::export_one<S>(layout, store.data() + r * sb, dim, out.data() + r * eb, eb, r);
  }
}

/// Import a whole table: `rows` external rows -> `rows` consecutive mpe store rows. Every
/// row is validated before any is written.
/// @param layout  the external layout, FbgemmFused or TbeInference, with its options.
/// @param in      (rows, external_row_bytes<S>(layout, dim)) bytes, row-major.
/// @param rows    number of rows (>= 0; negative throws std::invalid_argument).
/// @param dim     D, elements per row (>= 1).
/// @param row_alignment mpe's store row padding in bytes, a power of two (as
///                EmbeddingConfig::row_alignment; TbeInference::row_alignment pads the
///                external rows).
/// @param store   (rows, row_bytes<S>(dim, row_alignment)) bytes, row-major.
/// @return the number of rows imported saturated (the saturation rule in the file comment).
/// @throws std::invalid_argument as import_row (naming the row); `store` is then unchanged.
template <StoragePolicy S, class Layout>
std::int64_t import_table(const Layout& layout, std::span<const std::uint8_t> in, std::int64_t rows,
                          std::int32_t dim, std::int32_t row_alignment, std::span<std::uint8_t> store) {
  if (rows < 0) throw std::invalid_argument("mpe::interop: rows must be >= 0, got " + std::to_string(rows));
  const std::size_t eb = external_row_bytes<S>(layout, dim);
  detail::check_pow2("row_alignment", row_alignment);
  const std::size_t sb = row_bytes<S>(dim, row_alignment);
  detail::check_size("in", in.size(), static_cast<std::size_t>(rows) * eb);
  detail::check_size("store", store.size(), static_cast<std::size_t>(rows) * sb);
  std::vector<std::int64_t> saturated;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (detail::check_import<S>(layout, in.data() + r * eb, dim, r)) saturated.push_back(r);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    detail::import_one<S>(layout, in.data() + r * eb, dim, store.data() + r * sb, sb);
  }
  for (const std::int64_t r : saturated) detail::saturate_row<S>(store.data() + r * sb, dim);
  return static_cast<std::int64_t>(saturated.size());
}

}  // namespace mpe::interop
