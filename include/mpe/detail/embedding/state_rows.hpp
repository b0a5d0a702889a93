// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/state_rows.hpp
/// @brief detail::state_row_fault: whether bytes are a store row in state form (the check
/// of CachedEmbedding::import_store_rows() and of a checkpoint's store section).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "mpe/numeric/float_ops.hpp"
#include "mpe/optim/all.hpp"
#include "mpe/storage/storage.hpp"

namespace mpe {

namespace detail {

/// Why `row` (state_row_bytes `fs` bytes) is not a state-form row of S at dim D: its padding
/// is not zeros, or an element decodes to a value S cannot hold (not finite, beyond
/// S::limit); empty when it is one. The message names the byte or element and value.
template <StoragePolicy S>
std::string state_row_fault(const std::uint8_t* row, std::int32_t D, std::size_t fs) {
  const std::size_t data = S::data_bytes(D);
  for (std::size_t k = data; k < fs; ++k) {
    if (row[k] != 0) {
      return "padding byte " + std::to_string(k) + " = " + std::to_string(row[k]) + "; the " +
             std::to_string(fs - data) + " bytes after a row's " + std::to_string(data) +
             " data bytes are zeros";
    }
  }
  const typename S::Reader rd(row, D);
  for (std::int32_t d = 0; d < D; ++d) {
    if (const float x = rd[d]; !(num::is_finite(x) && x <= S::limit && x >= -S::limit)) {
      return "element " + std::to_string(d) + " decodes to " + format_float(x) + "; " + std::string(S::name) +
             " holds finite values within +-" + format_float(S::limit);
    }
  }
  return {};
}

/// Why `indices` (n) and `offsets` (T*B + 1, T = table_rows.size(), host memory) are not one
/// valid CSR batch of tables with `table_rows` rows each (offsets start at 0, never decrease
/// and end at n; every index of bag j = t*B + b lies in [0, table_rows[t])); empty when they
/// are. The message names the entry and its value ("offsets[j] = ...", "indices[i] = ...").
/// The checks of a checkpoint's pending_batch section and of CachedEmbedding::restore_state()'s
/// pending prefetch. offsets.size() must be T*B + 1 for some B >= 0 (the callers check it).
inline std::string csr_batch_fault(std::span<const std::int64_t> table_rows,
                                   std::span<const std::int64_t> indices,
                                   std::span<const std::int64_t> offsets) {
  const auto n = static_cast<std::int64_t>(indices.size());
  if (offsets.front() != 0) return "offsets[0] = " + std::to_string(offsets.front()) + "; must be 0";
  if (offsets.back() != n) {
    return "offsets[" + std::to_string(offsets.size() - 1) + "] = " + std::to_string(offsets.back()) +
           "; must equal n = " + std::to_string(n);
  }
  for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {
    if (offsets[j] > offsets[j + 1]) {
      return "offsets[" + std::to_string(j + 1) + "] = " + std::to_string(offsets[j + 1]) + " < offsets[" +
             std::to_string(j) + "] = " + std::to_string(offsets[j]);
    }
  }
  const std::size_t B = (offsets.size() - 1) / table_rows.size();
  for (std::size_t j = 0; j + 1 < offsets.size(); ++j) {  // offsets are valid: every bag lies in [0, n)
    const std::size_t t = j / B;
    for (std::int64_t i = offsets[j]; i < offsets[j + 1]; ++i) {
      const std::int64_t x = indices[static_cast<std::size_t>(i)];
      if (x < 0 || x >= table_rows[t]) {
        return "indices[" + std::to_string(i) + "] = " + std::to_string(x) + " is outside table " +
               std::to_string(t) + " (" + std::to_string(table_rows[t]) + " rows)";
      }
    }
  }
  return {};
}

/// Whether `name` is one of KnownOptimizers; then S = its state_floats(dim). (A plain
/// function: nvcc refuses the generic lambda of KnownOptimizers::visit inside a member of
/// the class template.)
inline bool known_state_floats(const std::string& name, std::int32_t dim, std::int64_t& S) {
  return KnownOptimizers::visit(name, [&]<class Opt>() { S = OptimizerRule<Opt>::state_floats(dim); });
}

}  // namespace detail

}  // namespace mpe
