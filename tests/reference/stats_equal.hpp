// SPDX-License-Identifier: Apache-2.0
// Field-by-field equality of two CacheStats (doctest CHECKs, so a failure names the field).
#pragma once

#include <doctest/doctest.h>

#include <mpe/core/types.hpp>

namespace ref {

inline void check_stats_equal(const mpe::CacheStats& a, const mpe::CacheStats& b) {
  CHECK(a.lookups == b.lookups);
  CHECK(a.unique_rows == b.unique_rows);
  CHECK(a.hits == b.hits);
  CHECK(a.misses == b.misses);
  CHECK(a.conflict_misses == b.conflict_misses);
  CHECK(a.evictions == b.evictions);
  CHECK(a.writebacks == b.writebacks);
  CHECK(a.lfu_rejections == b.lfu_rejections);
  CHECK(a.saturated_rows == b.saturated_rows);
  CHECK(a.bytes_filled == b.bytes_filled);
  CHECK(a.bytes_written_back == b.bytes_written_back);
  CHECK(a.skipped_steps == b.skipped_steps);
}

}  // namespace ref
