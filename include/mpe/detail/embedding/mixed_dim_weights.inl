// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/mixed_dim_weights.inl
/// @brief MixedDimEmbedding: set_weights / get_weights of one table and init_uniform with a range
/// per table (included by mpe/embedding/mixed_dim_embedding.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mpe {

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::set_weights(
    std::int64_t t, std::span<const float> weights, std::int64_t first_row) {
  check_table("set_weights", t, first_row, weights.size());
  const auto D = static_cast<std::size_t>(layout_.dims[static_cast<std::size_t>(t)]);
  for (std::size_t r = 0; r < weights.size() / D; ++r) {  // named in the caller's table and row
    if (const std::int32_t d =
            Storage::find_unrepresentable(weights.data() + r * D, static_cast<std::int32_t>(D));
        d >= 0) {
      const std::size_t i = r * D + static_cast<std::size_t>(d);
      invalid("set_weights", "weights[" + std::to_string(i) + "] = " + format_float(weights[i]) + " (table " +
                                 std::to_string(t) + ", row " +
                                 std::to_string(first_row + static_cast<std::int64_t>(r)) +
                                 ") cannot be stored as " + Storage::name + " (non-finite or |x| > " +
                                 format_float(Storage::limit) + ")");
    }
  }
  group_of_table(t).set_weights(weights, global_row(t, first_row));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::get_weights(
    std::int64_t t, std::span<float> out, std::int64_t first_row) const {
  check_table("get_weights", t, first_row, out.size());
  groups_[static_cast<std::size_t>(layout_.group_of[static_cast<std::size_t>(t)])].get_weights(
      out, global_row(t, first_row));
}

template <StoragePolicy Storage, CachePolicy Cache, RoundingPolicy Rounding,
          StatePrecisionPolicy StatePrecision, class Backend>
inline void MixedDimEmbedding<Storage, Cache, Rounding, StatePrecision, Backend>::init_uniform(
    std::span<const float> low, std::span<const float> high) {
  const char* fn = "init_uniform";
  for (const auto& [name, v] : {std::pair{"low", low}, std::pair{"high", high}}) {
    if (static_cast<std::int64_t>(v.size()) != layout_.T()) {
      invalid(fn, std::string(name) + ".size() = " + std::to_string(v.size()) +
                      "; expected one value per table, T = " + std::to_string(layout_.T()));
    }
  }
  for (std::size_t t = 0; t < low.size(); ++t) {
    if (!num::is_finite(low[t]) || !num::is_finite(high[t]) || !(low[t] < high[t]) ||
        low[t] < -Storage::limit || high[t] > Storage::limit) {
      invalid(fn, "table " + std::to_string(t) + ": [low[" + std::to_string(t) + "], high[" +
                      std::to_string(t) + "]) = [" + format_float(low[t]) + ", " + format_float(high[t]) +
                      ") must be finite, non-empty and within +-" + format_float(Storage::limit));
    }
  }
  std::vector<float> lo, hi;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    lo.clear();
    hi.clear();
    for (std::int64_t t : layout_.group_tables[g]) {
      lo.push_back(low[static_cast<std::size_t>(t)]);
      hi.push_back(high[static_cast<std::size_t>(t)]);
    }
    groups_[g].init_uniform(std::span<const float>(lo), std::span<const float>(hi));
  }
}

}  // namespace mpe
