// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/kernels/mixed_dim.hpp
/// @brief MixedDimEmbedding's batch plumbing as per-item code (not public), for backends
/// whose spans live in backend memory (`Backend::device_spans`): the fault count of a whole
/// table-major CSR batch, its table boundaries, each D-group's offsets, and the column
/// copies between a (B, k*D_g) group buffer and the caller's (B, sum D_t) buffer.
/// Trivially copyable, `MPE_HOST_DEVICE`, run by HostBackend's loops and launched as
/// kernels by CudaBackend; each writes disjoint outputs per item. Integer copies only: no
/// float arithmetic, so every backend gives the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mpe/numeric/config.hpp"
#include "mpe/numeric/float_ops.hpp"

namespace mpe::detail {

/// The table layout of a MixedDimEmbedding in backend memory (pointers into one array,
/// uploaded once): T tables, G groups.
struct MixedMeta {
  const index_t* rows;         // (T) rows of table t
  const index_t* flat;         // (T) tables in group order: group g's are flat[first[g] .. first[g+1])
  const index_t* flat_column;  // (T) first output column of table flat[i]
  const index_t* first;        // (G + 1) each group's start in flat
};

/// Faults of a table-major CSR batch (T tables, B bags each, n indices, nw weights),
/// counted by `reduce_to` over bags + 1 + nw items: item j < bags: offsets[j] >
/// offsets[j+1], then (offsets of bag j in order and inside [0, n)) each index of bag j
/// outside [0, rows of its table t = j / B); item bags: offsets[0] != 0, offsets[bags] != n;
/// item bags + 1 + p: per-sample weight p not finite (nw = 0 when not required). Zero:
/// the batch is valid. Only the count: a fault is named by the host checker on a copy.
struct CountBatchFaults {
  const index_t* indices;  // (n)
  const index_t* offsets;  // (bags + 1)
  const float* weights;    // (nw) or null
  const index_t* rows;     // (T)
  index_t B;
  index_t bags;  // T * B
  index_t n;
  MPE_HOST_DEVICE index_t operator()(index_t j) const {
    if (j < bags) {
      const index_t lo = offsets[j], hi = offsets[j + 1];
      if (lo > hi) return 1;
      if (lo < 0 || hi > n) return 0;  // item bags counts it (offsets[0] or offsets[bags])
      const index_t r = rows[j / B];
      index_t bad = 0;
      for (index_t p = lo; p < hi; ++p) bad += (indices[p] < 0 || indices[p] >= r) ? 1 : 0;
      return bad;
    }
    if (j == bags) return (offsets[0] != 0 ? 1 : 0) + (offsets[bags] != n ? 1 : 0);
    return num::is_finite(weights[j - bags - 1]) ? 0 : 1;
  }
};

/// Non-finite elements of a float array (`reduce_to` over its n elements).
struct CountNonFinite {
  const float* values;
  MPE_HOST_DEVICE index_t operator()(index_t i) const { return num::is_finite(values[i]) ? 0 : 1; }
};

/// Item g of G: for each table t of group g, bounds[t] = offsets[t*B] (item 0 also writes
/// bounds[T] = offsets[T*B]) and base[t] = the position of table t's first index in its
/// group's indices (the lengths of the group's earlier tables summed). Meaningful only
/// for a valid batch.
struct MixedBounds {
  MixedMeta meta;
  const index_t* offsets;  // (T*B + 1)
  index_t B;
  index_t T;
  index_t* bounds;  // (T + 1)
  index_t* base;    // (T)
  MPE_HOST_DEVICE void operator()(index_t g) const {
    if (g == 0) bounds[T] = offsets[T * B];
    index_t pos = 0;
    for (index_t i = meta.first[g]; i < meta.first[g + 1]; ++i) {
      const index_t t = meta.flat[i];
      bounds[t] = offsets[t * B];
      base[t] = pos;
      pos += offsets[(t + 1) * B] - offsets[t * B];
    }
  }
};

/// Group offsets (k*B + 1) of a group whose k tables are tables[0 .. k): item j = i*B + b
/// (the last item j = k*B is table k-1's bag B) = base[t] + offsets[t*B + b] - offsets[t*B],
/// t = tables[i]. Launch k*B + 1 items.
struct MixedGroupOffsets {
  const index_t* offsets;  // (T*B + 1) the caller's
  const index_t* tables;   // (k) the group's tables (MixedMeta::flat + first[g])
  const index_t* base;     // (T) MixedBounds::base
  index_t B;
  index_t k;
  index_t* out;  // (k*B + 1)
  MPE_HOST_DEVICE void operator()(index_t j) const {
    index_t i = 0;
    if (B > 0) {
      i = j / B;
      if (i >= k) i = k - 1;
    }
    const index_t t = tables[i];
    out[j] = base[t] + offsets[t * B + (j - i * B)] - offsets[t * B];
  }
};

/// Element e = b*(k*D) + i*D + d of a group buffer (B, k*D) and element b*W + column[i] + d
/// of a caller buffer (B, W): ToCaller copies the group's into the caller's (the output),
/// otherwise the caller's into the group's (the gradient). Launch B*k*D items.
template <bool ToCaller>
struct MixedColumns {
  std::conditional_t<ToCaller, const float*, float*> group;   // (B, k*D)
  std::conditional_t<ToCaller, float*, const float*> caller;  // (B, W)
  const index_t* column;  // (k) first caller column of the group's table i
  index_t k;
  index_t D;
  index_t W;
  MPE_HOST_DEVICE void operator()(index_t e) const {
    const index_t row = k * D;
    const index_t b = e / row, c = e - b * row;
    const index_t i = c / D, d = c - i * D;
    const index_t at = b * W + column[i] + d;
    if constexpr (ToCaller) {
      caller[at] = group[e];
    } else {
      group[e] = caller[at];
    }
  }
};

}  // namespace mpe::detail
