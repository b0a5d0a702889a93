// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/state_rows.hpp
/// @brief detail::state_row_fault: whether bytes are a store row in state form (the check
/// of CachedEmbedding::import_store_rows() and of a checkpoint's store section).
#pragma once

#include <cstddef>
#include <cstdint>
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

/// Whether `name` is one of KnownOptimizers; then S = its state_floats(dim). (A plain
/// function: nvcc refuses the generic lambda of KnownOptimizers::visit inside a member of
/// the class template.)
inline bool known_state_floats(const std::string& name, std::int32_t dim, std::int64_t& S) {
  return KnownOptimizers::visit(name, [&]<class Opt>() { S = OptimizerRule<Opt>::state_floats(dim); });
}

}  // namespace detail

}  // namespace mpe
