// SPDX-License-Identifier: Apache-2.0
/// @file mpe/io/fbgemm.hpp
/// @brief Per-table export of a CachedEmbedding to FBGEMM's and TorchRec's weight layouts,
/// and import back, on top of the per-row conversions of mpe/io/interop.hpp.
///
/// Layouts (the row formats are documented, with their sources, in interop.hpp):
///   - `interop::FbgemmFused{}`: FBGEMM's training-side TBE / fused row-wise layouts —
///     fused 8-bit row-wise (D x u8, f32 scale, f32 bias; `FloatToFused8BitRowwiseQuantized`),
///     fused N-bit row-wise with N = 4 (ceil(D/2) bytes, element 2i in the low nibble, f16
///     scale, f16 bias; `FloatToFusedNBitRowwiseQuantizedSBHalf`) or N = 2 (ceil(D/4) bytes,
///     element 4i+k in bits 2k..2k+1 of byte i, f16 scale, f16 bias; the same op with
///     bit_rate 2), FP16 and FP32 (D plain elements). Which one follows from the store's
///     format (`Int8Rowwise`, `Int4Rowwise`, `Int2Rowwise`, `Fp16`, `Fp32`, also `Bf16`), or
///     from `Target` for a converting export.
///   - `interop::TbeInference{row_alignment}`: FBGEMM's `IntNBitTableBatchedEmbeddingBagsCodegen`
///     weights, which TorchRec's quantized EmbeddingBagCollection holds: f16 scale, f16 bias in
///     front of the codes (`DEFAULT_SCALE_BIAS_SIZE_IN_BYTES = 4`;
///     fbgemm_gpu/tbe/utils/quantize.py `quantize_embs` splits the fused row into codes and a
///     4-byte scale/shift, [0:2] scale, [2:4] bias), each row padded to `row_alignment`
///     (FBGEMM `padded_row_size_in_bytes`; 16 on CUDA).
///
/// Memory: host. Both calls synchronize (they copy the table's store rows between backend
/// and host memory). Extra memory: the table's store bytes plus the exported bytes, on the
/// host.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mpe/io/checkpoint.hpp"
#include "mpe/io/interop.hpp"

namespace mpe::io {

namespace detail {
template <class E>
void check_table(const char* fn, const E& emb, std::int64_t table) {
  if (table < 0 || table >= emb.num_tables()) {
    throw std::invalid_argument(std::string("mpe::io::") + fn + ": table = " + std::to_string(table) +
                                " is outside [0, " + std::to_string(emb.num_tables()) + ")");
  }
}

/// The store rows of one table in host memory, as interop.hpp lays them out:
/// (rows, row_bytes<S>(D, row_alignment)) bytes, without the slot index entries
/// (CachedEmbedding::read_store_rows). Synchronizes.
template <class E>
std::vector<std::uint8_t> table_store_bytes(E& emb, std::int64_t table) {
  std::vector<std::uint8_t> host;
  emb.read_store_rows(emb.table_offset(table),
                      static_cast<std::size_t>(emb.config().table_rows[static_cast<std::size_t>(table)]),
                      host);
  return host;
}
}  // namespace detail

/// Exports table `table` as (rows, external row bytes) row-major bytes in `layout`.
///
/// Non-const because it calls flush() first (dirty cache rows are written back to the store
/// with the Rounding policy, counted in stats as write-backs); cached rows stay resident.
/// The export is then the store's content: with `Target` = the store's format (default) a
/// byte move (except Int8Rowwise to TbeInference, which re-quantizes to f16 parameters, see
/// interop.hpp); with another `Target` every row is dequantized and re-encoded as `Target`
/// with round-to-nearest (FP32 from any store is exact).
///
/// @tparam Target row format of the output (Fp32, Fp16, Bf16, Int8Rowwise, Int4Rowwise,
///         Int2Rowwise).
/// @throws std::invalid_argument for a table outside [0, T), a row value `Target` cannot
///         hold (naming the row and value), or an invalid layout; the store is flushed
///         even then.
template <class Target = void, class E, class Layout>
std::vector<std::uint8_t> export_table(E& emb, std::int64_t table, const Layout& layout) {
  using S = typename E::storage_type;
  using T = std::conditional_t<std::is_void_v<Target>, S, Target>;
  detail::check_table("export_table", emb, table);
  const std::int32_t D = emb.dim();
  const auto rows = emb.config().table_rows[static_cast<std::size_t>(table)];
  const std::size_t eb = interop::external_row_bytes<T>(layout, D);  // validates the layout
  emb.flush();
  const std::vector<std::uint8_t> store = detail::table_store_bytes(emb, table);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows) * eb);
  if constexpr (std::is_same_v<T, S>) {
    interop::export_table<S>(layout, store, rows, D, emb.config().row_alignment, out);
  } else {
    const std::size_t sb = emb.state_row_bytes();
    const std::size_t tb = row_bytes<T>(D, 1);
    std::vector<std::uint8_t> converted(static_cast<std::size_t>(rows) * tb);
    std::vector<float> x(static_cast<std::size_t>(D));
    const num::RowRng unused{0, 0, 0, num::RoundingSite::SetWeights};
    for (std::int64_t r = 0; r < rows; ++r) {
      const typename S::Reader rd(store.data() + static_cast<std::size_t>(r) * sb, D);
      for (std::int32_t d = 0; d < D; ++d) x[static_cast<std::size_t>(d)] = rd[d];
      if (const std::int32_t bad = T::find_unrepresentable(x.data(), D); bad >= 0) {
        throw std::invalid_argument("mpe::io::export_table: table " + std::to_string(table) + " row " +
                                    std::to_string(r) + " element " + std::to_string(bad) + " = " +
                                    std::to_string(x[static_cast<std::size_t>(bad)]) + " cannot be held by " +
                                    T::name);
      }
      T::template store<NearestRounding>(x.data(), D, converted.data() + static_cast<std::size_t>(r) * tb,
                                         unused);
    }
    interop::export_table<T>(layout, converted, rows, D, 1, out);
  }
  return out;
}

/// Replaces the rows of table `table` with `bytes` ((rows, external row bytes) in `layout`,
/// host memory) of the store's own format (Int8Rowwise reads fused 8-bit or TBE INT8,
/// Int4Rowwise fused 4-bit or TBE INT4, Int2Rowwise fused 2-bit or TBE INT2, Fp16/Fp32/Bf16
/// plain rows). The conversion is exact
/// (interop.hpp), except for rows that decode beyond the store's limit by at most one
/// quantization step (FBGEMM's own INT2/INT4/INT8 quantization of values near +-65504 gives
/// them): those are saturated into the range (interop.hpp's saturation rule), counted in
/// stats().saturated_rows, and their number is returned. Every row is validated before
/// anything changes.
///
/// As set_weights() does, the table's cache lines are dropped without write-back (their
/// rows are replaced); other tables' lines, dirty or not, stay resident. A batch populated
/// before the import (awaiting backward() or prefetched) stays usable: it reads and updates
/// the imported rows in the store. Under EmbeddingConfig::defer_admission the admission a
/// forward() left pending is made first, from the rows before the import (as set_weights()
/// does), so the object trains the bits it trains without the setting. Optimizer state,
/// step, seed and stats are kept.
///
/// @throws std::invalid_argument for a table outside [0, T), a wrong byte count, an invalid
///         layout, or a row holding an element the store cannot (each element decoded as the store reads it;
///         the message names row, element and value); the object is then unchanged.
/// @return the number of rows imported saturated.
template <class E, class Layout>
std::int64_t import_table(E& emb, std::int64_t table, const Layout& layout,
                          std::span<const std::uint8_t> bytes) {
  using S = typename E::storage_type;
  detail::check_table("import_table", emb, table);
  const std::int32_t D = emb.dim();
  const auto rows = emb.config().table_rows[static_cast<std::size_t>(table)];
  const std::size_t fs = emb.state_row_bytes();
  std::vector<std::uint8_t> store(static_cast<std::size_t>(rows) * fs);
  const std::int64_t saturated =
      interop::import_table<S>(layout, bytes, rows, D, emb.config().row_alignment, store);  // validates all
  // The rows replaced, their cache lines dropped, the saturated ones counted.
  emb.import_store_rows(emb.table_offset(table), store, saturated);
  return saturated;
}

}  // namespace mpe::io
