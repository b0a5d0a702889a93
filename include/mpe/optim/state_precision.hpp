// SPDX-License-Identifier: Apache-2.0
/// @file mpe/optim/state_precision.hpp
/// @brief Optimizer-state precision policies (`StateFp32`, `StateBf16`, `StateFp16`): the
/// 5th template parameter of CachedEmbedding, and how state values are encoded.
///
/// Why a template parameter of the table and not a member of the optimizer: the precision
/// fixes the layout of memory the table owns (bytes per state value, whether cached rows
/// hold their state in FP32 beside the row) and what a checkpoint holds, exactly as
/// `Storage` does for the weights; the optimizer value is passed per backward() call and
/// may change its hyperparameters every step, so it cannot own a layout. The default
/// `StateFp32` keeps every existing `CachedEmbedding<S, C, R>` and
/// `CachedEmbedding<S, C, R, Backend>` unchanged, bit for bit.
///
/// | policy | bytes a value | Adam row (2D values) | RowwiseAdagrad row | state of a cached row |
/// |---|---|---|---|---|
/// | `StateFp32` | 4 | 8D | 4 | in the FP32 state array (rows, S), updated in place |
/// | `StateBf16` | 2 | 4D | 2 | FP32 in the cache, beside the row (slots, S) |
/// | `StateFp16` | 2 | 4D | 2 | FP32 in the cache, beside the row (slots, S) |
///
/// **Compact precisions (BF16, FP16): the state lives with its row.** The store holds
/// (rows, S) 16-bit values; while a row is cached its state is held in FP32 in the cache
/// (slots, S), decoded on fill, and rounded back into the store (with the table's
/// Rounding) when the row is written back: on eviction of a dirty row, flush(), and when
/// set_weights()/init_uniform()/an FBGEMM import drops a dirty cached row. An uncached row
/// updates its state in place: decode -> OptimizerRule::step -> encode. A clean cached
/// row's FP32 state is dropped on eviction (as its FP32 weights are): the store keeps the
/// value rounded at the last write-back. With `StateFp32` the write-back would be the
/// identity (the same bits), so the FP32 state is never copied into the cache: it stays in
/// its array and is updated in place (no cache memory, today's exact results).
///
/// **Rounding stream of state writes.** A state write of global row r at completed step t
/// rounds element k of the row's S values with word (k mod 4) of the Philox block
/// `RowRng{seed, r, t, site}.draw(k / 4)`, i.e. counter `{r_lo, r_hi, t, site << 24 | k/4}`
/// keyed by the table's seed, where site is one of the state sites of
/// num::RoundingSite: StateUpdate (8, an uncached row's step), StateWriteBack (9,
/// eviction), StateFlush (10, flush()), StateDrop (11, a dirty row dropped by
/// set_weights/init_uniform/import). Weight writes only use sites 1 to 6, so a row's
/// state and weight streams never share random bits. NearestRounding draws nothing
/// (round half to even). The element group k/4 is taken modulo 2^24 (S up to 2^26 values
/// have distinct groups; Adam at D = 4096 has S = 8192).
///
/// **Range.** Encoding saturates like the store formats: BF16 at +-0x1.FEp127, FP16 at
/// +-65504 (a finite state value never becomes inf; a rounding into the 16-bit store that
/// saturates counts its row once in `stats().saturated_rows`, as a weight write does:
/// an update of an uncached row, a write-back, a flush); values below the format's smallest
/// subnormal round to 0 (stochastically: to 0 or the smallest subnormal). FP16's range
/// is narrow for optimizer state: after one step Adam's second moment is (1 - beta2) g^2,
/// below FP16's smallest subnormal (6e-8) for |g| < ~7.7e-3 at beta2 = 0.999, after which
/// the update m / (sqrt(v) + eps) can grow by orders of magnitude, and Adagrad's accumulator saturates at
/// 65504. BF16 keeps FP32's range with 8 significant bits (relative error <= 2^-8 per rounding).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/numeric/philox.hpp"

namespace mpe {

/// Encoding of one stored optimizer-state value.
enum class StateFormat : std::uint8_t {
  Fp32 = 0,  ///< IEEE binary32, 4 bytes
  Bf16 = 1,  ///< bfloat16 (the top 16 bits of a binary32), 2 bytes
  Fp16 = 2,  ///< IEEE binary16, 2 bytes
};

/// FP32 optimizer state (the default): 4 bytes per value, updated in place, never copied
/// into the cache. Results are those of mpe before state precisions existed.
struct StateFp32 {
  static constexpr const char* name = "fp32";  ///< names the precision in checkpoints and messages
  static constexpr StateFormat format = StateFormat::Fp32;  ///< encoding of one state value
  static constexpr std::size_t value_bytes = 4;             ///< bytes of one stored state value
  /// Whether cached rows hold their state in FP32 in the cache (see the file comment).
  static constexpr bool cached = false;
};

/// BF16 optimizer state: 2 bytes per value, written with the table's Rounding; cached
/// rows hold theirs in FP32 in the cache.
struct StateBf16 {
  static constexpr const char* name = "bf16";  ///< names the precision in checkpoints and messages
  static constexpr StateFormat format = StateFormat::Bf16;  ///< encoding of one state value
  static constexpr std::size_t value_bytes = 2;             ///< bytes of one stored state value
  static constexpr bool cached = true;  ///< cached rows hold their state in FP32 in the cache
};

/// FP16 optimizer state: 2 bytes per value, written with the table's Rounding; cached
/// rows hold theirs in FP32 in the cache. Narrow range: see the file comment.
struct StateFp16 {
  static constexpr const char* name = "fp16";  ///< names the precision in checkpoints and messages
  static constexpr StateFormat format = StateFormat::Fp16;  ///< encoding of one state value
  static constexpr std::size_t value_bytes = 2;             ///< bytes of one stored state value
  static constexpr bool cached = true;  ///< cached rows hold their state in FP32 in the cache
};

/// An optimizer-state precision policy (StateFp32, StateBf16, StateFp16).
template <class P>
concept StatePrecisionPolicy = requires {
  { P::name } -> std::convertible_to<const char*>;
  { P::format } -> std::convertible_to<StateFormat>;
  { P::value_bytes } -> std::convertible_to<std::size_t>;
  { P::cached } -> std::convertible_to<bool>;
};

/// Name of a format ("fp32", "bf16", "fp16"), as checkpoints record it.
inline const char* state_format_name(StateFormat f) {
  return f == StateFormat::Bf16 ? "bf16" : f == StateFormat::Fp16 ? "fp16" : "fp32";
}

namespace num {

/// Value `k` of a stored state row `p` (format f) as a float (exact).
MPE_HOST_DEVICE inline float decode_state(StateFormat f, const std::uint8_t* p, std::int64_t k) {
  if (f == StateFormat::Fp32) {
    float x;
    std::memcpy(&x, p + 4 * k, 4);
    return x;
  }
  const std::uint16_t h = load_u16(p + 2 * k);
  return f == StateFormat::Bf16 ? bf16_to_float(h) : half_to_float(h);
}

/// Encodes `n` state values `src` into the stored row `p` (format f) with rounding policy
/// R, drawing from `rng` (one Philox block per 4 values, value k using word k mod 4 of
/// draw(k / 4); nothing drawn when R is not stochastic). FP32 copies exactly. Returns
/// whether a value saturated.
template <class R>
MPE_HOST_DEVICE inline bool encode_state(StateFormat f, const float* src, std::int64_t n, std::uint8_t* p,
                                         const RowRng& rng) {
  if (f == StateFormat::Fp32) {
    std::memcpy(p, src, static_cast<std::size_t>(n) * 4);
    return false;
  }
  bool sat = false;
  for_each_element<R>(n, rng, [&](std::int32_t k, std::uint32_t w) {
    const NarrowResult h = f == StateFormat::Bf16 ? float_to_bf16<R>(src[k], w) : float_to_half<R>(src[k], w);
    sat = sat || h.saturated;
    store_u16(p + 2 * k, h.bits);
  });
  return sat;
}

}  // namespace num

/// A list of optimizer-state precisions (a type list: see KnownStatePrecisions).
template <class... Precisions>
struct StatePrecisionList {};

/// Every optimizer-state precision.
using KnownStatePrecisions = StatePrecisionList<StateFp32, StateBf16, StateFp16>;

}  // namespace mpe
