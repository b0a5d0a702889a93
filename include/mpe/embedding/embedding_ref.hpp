// SPDX-License-Identifier: Apache-2.0
/// @file mpe/embedding/embedding_ref.hpp
/// @brief `EmbeddingRef<Storage>`: a trivially copyable read view of a CachedEmbedding
/// (store, cache, table offsets) for users' own per-item code: host loops with
/// HostBackend, or CUDA kernels with CudaBackend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "mpe/cache/cache_ref.hpp"
#include "mpe/numeric/config.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

/// Read view of the rows of a CachedEmbedding, obtained from `CachedEmbedding::ref()`.
///
/// A row is read through the cache: a row with a cache slot reads its FP32 cache row,
/// any other row is dequantized from the store (Storage::Reader: x = scale * q + bias
/// for the row-wise formats). This is exactly what get_weights() returns.
///
/// Memory space: every pointer is the backend's memory (host with HostBackend, device
/// with CudaBackend: then call the members from device code only; with the Managed or
/// HostMapped placement only the store is host-visible). Valid until the embedding is
/// moved, destroyed, or its cache/store changes (forward, backward, prefetch, flush,
/// set_weights, init_uniform, load): use it between those calls, ordered on the
/// backend's stream. No bounds checks: rows in [0, total_rows), tables in [0, T),
/// elements in [0, dim).
template <StoragePolicy Storage>
struct EmbeddingRef {
  const std::uint8_t* store = nullptr;          ///< (rows, stride) bytes in Storage format
  std::size_t stride = 0;                       ///< bytes of one stored row, padding and slot entry included
  CacheRef cache;                               ///< FP32 cache (num_sets = 0: no cache)
  const std::int64_t* table_offsets = nullptr;  ///< (T + 1) first global row of each table
  std::int64_t num_tables = 0;                  ///< T
  std::int32_t dim = 0;                         ///< D

  /// Global row of local row `local` of table `table` (table 0 first).
  MPE_HOST_DEVICE std::int64_t global_row(std::int64_t table, std::int64_t local) const {
    return table_offsets[table] + local;
  }
  /// Element d of global row `row`, read through the cache. O(ways) for the cache lookup.
  MPE_HOST_DEVICE float element(std::int64_t row, std::int32_t d) const {
    const std::int64_t s = cache.find(row);
    if (s >= 0) return cache.row(s)[d];
    const typename Storage::Reader rd(store + static_cast<std::size_t>(row) * stride, dim);
    return rd[d];
  }
  /// Element d of local row `local` of table `table`.
  MPE_HOST_DEVICE float element(std::int64_t table, std::int64_t local, std::int32_t d) const {
    return element(global_row(table, local), d);
  }
  /// Writes global row `row` (D floats) to `out`, read through the cache.
  MPE_HOST_DEVICE void read_row(std::int64_t row, float* out) const {
    const std::int64_t s = cache.find(row);
    if (s >= 0) {
      const float* c = cache.row(s);
      for (std::int32_t d = 0; d < dim; ++d) out[d] = c[d];
      return;
    }
    const typename Storage::Reader rd(store + static_cast<std::size_t>(row) * stride, dim);
    for (std::int32_t d = 0; d < dim; ++d) out[d] = rd[d];
  }
  /// Writes local row `local` of table `table` (D floats) to `out`.
  MPE_HOST_DEVICE void read_row(std::int64_t table, std::int64_t local, float* out) const {
    read_row(global_row(table, local), out);
  }
};

namespace detail {

/// Reads global rows [first, first + count) through the cache into out (count, D), as
/// EmbeddingRef::read_row does (get_weights' per-row functor).
template <class Storage>
struct ReadRows {
  EmbeddingRef<Storage> ref;
  index_t first;
  float* out;
  MPE_HOST_DEVICE void operator()(index_t i) const { ref.read_row(first + i, out + i * ref.dim); }
};

}  // namespace detail

}  // namespace mpe
