// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/row_accumulate.hpp
/// @brief Dequantize-and-accumulate of one row into a pooled output (not public): the
/// inner loop of forward pooling (detail::PoolBags), written so that g++ vectorizes it
/// over d, and loads of rows ahead so their misses overlap (host only).
///
/// Bits: every element is computed exactly as `Storage::Reader` defines it (Int8:
/// add(mul(scale, q), bias); Int4 and Int2: the same with FP16 scale/bias; Fp32: the value) and
/// added to o[d] with one num::add (or num::add(o[d], num::mul(w, x))), so the per-element
/// add order is the caller's row order, as with the generic Reader loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/numeric/half.hpp"
#include "mpe/storage/all.hpp"

namespace mpe::detail {

/// Generic form: o (D) += x (D), x read through Storage::Reader; `w` scales each x when
/// `Weighted`. `row` and `o` never overlap.
template <class Storage>
struct RowAccumulate {
  static constexpr bool generic = true;  ///< the Reader loop (no format-specific loop)
  template <bool Weighted>
  MPE_HOST_DEVICE static void run(const std::uint8_t* row, std::int32_t D, float w, float* o) {
    const typename Storage::Reader rd(row, D);
    for (std::int32_t d = 0; d < D; ++d) {
      if constexpr (Weighted) {
        o[d] = num::add(o[d], num::mul(w, rd[d]));
      } else {
        o[d] = num::add(o[d], rd[d]);
      }
    }
  }
};

/// Whether RowAccumulate has a loop of its own for Storage (a specialization below) rather
/// than the generic Reader loop. tests/host/test_fast_paths.cpp lists every format's value.
template <class Storage>
inline constexpr bool has_row_accumulate = !requires {
  RowAccumulate<Storage>::generic;
};

/// Whether decode_chunk reads an aligned chunk of Storage's codes in one 32-bit load.
template <class Storage>
inline constexpr bool has_chunk_load = std::is_same_v<Storage, Int8Rowwise>;

/// FP32 rows (the store's Fp32 format, or a cache row).
inline MPE_HOST_DEVICE void accumulate_f32(const float* __restrict__ x, std::int32_t D, float w,
                                           float* __restrict__ o, bool weighted) {
  if (weighted) {
    for (std::int32_t d = 0; d < D; ++d) o[d] = num::add(o[d], num::mul(w, x[d]));
  } else {
    for (std::int32_t d = 0; d < D; ++d) o[d] = num::add(o[d], x[d]);
  }
}

template <>
struct RowAccumulate<Fp32> {
  template <bool Weighted>
  MPE_HOST_DEVICE static void run(const std::uint8_t* row, std::int32_t D, float w, float* o) {
    // Unaligned loads as the Reader (row_alignment may be below 4).
    const std::uint8_t* __restrict__ r = row;
    float* __restrict__ out = o;
    for (std::int32_t d = 0; d < D; ++d) {
      const float x = num::load_f32(r + 4 * d);
      if constexpr (Weighted) {
        out[d] = num::add(out[d], num::mul(w, x));
      } else {
        out[d] = num::add(out[d], x);
      }
    }
  }
};

template <>
struct RowAccumulate<Int8Rowwise> {
  template <bool Weighted>
  MPE_HOST_DEVICE static void run(const std::uint8_t* row, std::int32_t D, float w, float* o) {
    const float scale = num::load_f32(row + D), bias = num::load_f32(row + D + 4);
    const std::uint8_t* __restrict__ q = row;
    float* __restrict__ out = o;
    for (std::int32_t d = 0; d < D; ++d) {
      const float x = num::add(num::mul(scale, static_cast<float>(q[d])), bias);
      if constexpr (Weighted) {
        out[d] = num::add(out[d], num::mul(w, x));
      } else {
        out[d] = num::add(out[d], x);
      }
    }
  }
};

/// INT4 and INT2 rows (FBGEMM's fused N-bit layout): element (8 / N) k + j in bits
/// [N j, N j + N) of byte k, decoded with the Reader's scale and bias.
template <FusedNbitStorage S>
struct RowAccumulate<S> {
  template <bool Weighted>
  MPE_HOST_DEVICE static void run(const std::uint8_t* row, std::int32_t D, float w, float* o) {
    constexpr int kBits = S::bits, kPerByte = 8 / kBits;
    constexpr std::uint32_t kMask = (1u << kBits) - 1u;
    const typename S::Reader rd(row, D);  // the row's FP16 scale and bias, as f32
    const float scale = rd.scale, bias = rd.bias;
    const std::uint8_t* __restrict__ q = row;
    float* __restrict__ out = o;
    const auto put = [&](std::int32_t d, std::uint32_t code) {
      const float x = num::add(num::mul(scale, static_cast<float>(code)), bias);
      if constexpr (Weighted) {
        out[d] = num::add(out[d], num::mul(w, x));
      } else {
        out[d] = num::add(out[d], x);
      }
    };
    const std::int32_t full = D / kPerByte;  // bytes whose every code is an element
    for (std::int32_t k = 0; k < full; ++k) {
      const std::uint32_t b = q[k];
      for (int j = 0; j < kPerByte; ++j) put(kPerByte * k + j, (b >> (kBits * j)) & kMask);
    }
    for (std::int32_t d = kPerByte * full; d < D; ++d)
      put(d, (static_cast<std::uint32_t>(q[full]) >> (kBits * (d - kPerByte * full))) & kMask);
  }
};

/// Elements per lane chunk of the laned functors (CudaBackend: a warp per bag or row):
/// lane `lane` of `lanes` takes elements [c, min(c + kLaneChunk, D)) for
/// c = kLaneChunk * lane, kLaneChunk * (lane + lanes), ... (see lane_chunk_begin). Four
/// elements are 4 bytes of an INT8 row, 16 of an FP32 row: a warp reads 128 or 512
/// contiguous bytes of a D = 128 row at once.
inline constexpr std::int32_t kLaneChunk = 4;
/// First element of lane `lane`'s first chunk.
MPE_HOST_DEVICE inline std::int32_t lane_chunk_begin(std::int32_t lane) { return kLaneChunk * lane; }
/// Distance between two chunks of one lane.
MPE_HOST_DEVICE inline std::int32_t lane_chunk_step(std::int32_t lanes) { return kLaneChunk * lanes; }

#ifdef __CUDA_ARCH__
/// x[0, 4) = p[0, 4) by one 16-byte load; p 16-byte aligned. Device code only.
__device__ inline void load_float4(const float* p, float* x) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  x[0] = f.x;
  x[1] = f.y;
  x[2] = f.z;
  x[3] = f.w;
}
#endif

/// x[e] = p[e] for e < m, 0 for m <= e < kLaneChunk (m <= kLaneChunk): one lane's chunk of
/// an FP32 row. In device code a whole chunk at a 16-byte-aligned address is one 16-byte
/// load (a warp's 32 chunks of a D = 128 row: one 512-byte request where four scalar loads
/// make four); elsewhere element by element. The same values either way.
MPE_HOST_DEVICE inline void load_lane_chunk(const float* p, std::int32_t m, float* x) {
  static_assert(kLaneChunk == 4, "load_lane_chunk: a chunk is one float4");
#ifdef __CUDA_ARCH__
  if (m == kLaneChunk && (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0) {
    load_float4(p, x);
    return;
  }
#endif
  MPE_UNROLL
  for (std::int32_t e = 0; e < kLaneChunk; ++e) x[e] = e < m ? p[e] : 0.0f;
}

/// p[e] = x[e] for e < m (m <= kLaneChunk): one lane's chunk of an FP32 row, written as
/// load_lane_chunk reads it (one 16-byte store in device code where whole and aligned).
MPE_HOST_DEVICE inline void store_lane_chunk(float* p, std::int32_t m, const float* x) {
#ifdef __CUDA_ARCH__
  if (m == kLaneChunk && (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
    return;
  }
#endif
  for (std::int32_t e = 0; e < m; ++e) p[e] = x[e];
}

/// Rows a lane of the laned store-only Int8Rowwise pooling (PoolBags::pool_store_words)
/// loads before decoding and adding them: the rows' ids, then their codes, scales and
/// biases, with no branch between, so that this many row reads are in flight per lane.
/// Two: the pooling kernel alone (INT8, D = 128, random rows of a 10M-row table) took
/// 0.195 / 0.175 / 0.194 / 0.200 ms for 1 / 2 / 4 / 8 rows on an H200 and 0.217 / 0.199 /
/// 0.217 / 0.222 ms on an H100. The macro MPE_POOL_LANE_GROUP (1 .. 16) overrides it, for
/// measuring; the bits do not depend on it (each lane adds its rows in order).
#ifndef MPE_POOL_LANE_GROUP
#define MPE_POOL_LANE_GROUP 2
#endif
inline constexpr int kPoolLaneGroup = MPE_POOL_LANE_GROUP;

/// The 4-byte word at p (4-byte aligned): one load in device code.
MPE_HOST_DEVICE inline std::uint32_t load_word(const std::uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const std::uint32_t*>(p);
#else
  std::uint32_t x;
  std::memcpy(&x, p, sizeof x);
  return x;
#endif
}

/// x[k] = Int8Rowwise's value of code byte k of word q (little-endian): add(mul(scale, q_k),
/// bias), as its Reader.
MPE_HOST_DEVICE inline void decode_int8_word(std::uint32_t q, float scale, float bias, float* x) {
  for (std::int32_t k = 0; k < 4; ++k)
    x[k] = num::add(num::mul(scale, static_cast<float>((q >> (8 * k)) & 0xffu)), bias);
}

/// x[k] = element d0 + k of a stored row of format Storage (the Reader's value) for k < n
/// (n <= kLaneChunk), 0 for n <= k < kLaneChunk. An Int8Rowwise chunk of four 4-byte-aligned
/// codes is read as one 32-bit word (the same codes).
template <class Storage>
MPE_HOST_DEVICE void decode_chunk(const std::uint8_t* row, std::int32_t D, std::int32_t d0, std::int32_t n,
                                  float* x) {
  const typename Storage::Reader rd(row, D);
  if constexpr (has_chunk_load<Storage> && kLaneChunk == 4) {
    if (n == 4 && (reinterpret_cast<std::uintptr_t>(row + d0) & 3u) == 0) {
      decode_int8_word(load_word(row + d0), rd.scale, rd.bias, x);
      return;
    }
  }
  for (std::int32_t k = 0; k < kLaneChunk; ++k) x[k] = k < n ? rd[d0 + k] : 0.0f;
}

/// acc[k] += x[d0 + k] for k < n (n <= kLaneChunk), x a stored row read through
/// Storage::Reader: the elements RowAccumulate computes, with the same operations.
template <class Storage, bool Weighted>
MPE_HOST_DEVICE void accumulate_chunk(const std::uint8_t* row, std::int32_t D, std::int32_t d0,
                                      std::int32_t n, float w, float* acc) {
  const typename Storage::Reader rd(row, D);
  for (std::int32_t k = 0; k < n; ++k) {
    if constexpr (Weighted) {
      acc[k] = num::add(acc[k], num::mul(w, rd[d0 + k]));
    } else {
      acc[k] = num::add(acc[k], rd[d0 + k]);
    }
  }
}

/// Touches the `bytes` bytes at p (one load per 64-byte line) so that their cache misses
/// overlap with the pooling of earlier rows (host only; a no-op in device code). No longer
/// used by PoolBags, which prefetches with detail::prefetch_lines and, store only,
/// simd::prefetch_row_lines (detail/host/common/rows.hpp); kept for
/// the peer side-by-side harness's `rep_touch` variant. (The "prefetches dropped on the KVM
/// guest" once given as the reason for loads was GCC deleting the prefetch calls: see
/// prefetch_lines.)
MPE_HOST_DEVICE inline void touch_lines(const void* p, std::size_t bytes) {
#ifndef __CUDA_ARCH__
  const char* c = static_cast<const char*>(p);
  const char* last = c + (bytes ? bytes - 1 : 0);
  for (; c <= last; c += 64) {
    const char v = *c;
    asm volatile("" : : "r"(v));  // keep the load; its value is not needed
  }
  const char v = *last;  // the last line when the row straddles one more line
  asm volatile("" : : "r"(v));
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace mpe::detail
