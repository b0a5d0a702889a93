// SPDX-License-Identifier: Apache-2.0
/// @file mpe/cache/hash.hpp
/// @brief The mixing hash that maps a global row to its cache set and to the LFU
/// sketch's counters.
#pragma once

#include <cstdint>

#include "mpe/numeric/config.hpp"

namespace mpe {

/// splitmix64's finalizer (Steele, Lea, Flood, "Fast splittable pseudorandom number
/// generators", OOPSLA 2014): a bijective 64-bit mix.
MPE_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// Set of a global row: mix64(row) mod num_sets (cache semantics, docs/architecture.md).
MPE_HOST_DEVICE inline std::int64_t set_of_row(std::int64_t row, std::int64_t num_sets) {
  return static_cast<std::int64_t>(mix64(static_cast<std::uint64_t>(row)) %
                                   static_cast<std::uint64_t>(num_sets));
}

}  // namespace mpe
