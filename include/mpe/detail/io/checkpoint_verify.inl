// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/io/checkpoint_verify.inl
/// @brief The checks of a checkpoint's sections beyond sizes and checksums, before
/// io::load() restores them: cache metadata consistent with the tables, every value one the
/// state can hold, a valid pending batch (included by mpe/io/checkpoint.hpp). Each failure
/// calls `c.fail(message)` (a Cursor of checkpoint_reader.inl: checkpoint_error naming the
/// source).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mpe::detail::ckpt {

namespace fmt = ::mpe::io::checkpoint;

/// The cache metadata of a checkpoint (payload[2] tags, [3] last_use, [4] dirty and the
/// policy section [5], as file bytes) is consistent: every tag is -1 or a row of its slot's
/// set, no row twice in a set, dirty only 0 or 1 and never on an empty slot, no last use
/// after `populate_counter`, the policy's words valid for the tags (Cache::check_meta) and
/// the decay clock below the policy's period. A file with valid checksums may still lie.
template <class E, class Cursor>
void check_cache(const E& e, const Cursor& c, const std::uint8_t* const* payload, std::uint32_t version,
                 std::uint64_t populate_counter, std::uint64_t decay_clock) {
  using C = typename E::cache_policy;
  const std::int64_t policy_words = C::meta_words(e.cache_slots());
  const auto quote = [](const std::string& s) { return "'" + s + "'"; };
  const index_t slots = e.cache_slots();
  const index_t W = C::ways;
  for (index_t s = 0; s < slots; ++s) {
    index_t tag;
    std::uint64_t last;
    std::memcpy(&tag, payload[2] + s * 8, 8);
    std::memcpy(&last, payload[3] + s * 8, 8);
    const std::uint8_t dirty = payload[4][s];
    const std::string slot = "slot " + std::to_string(s);
    if (tag < -1 || tag >= e.total_rows()) {
      c.fail("tags: " + slot + " holds row " + std::to_string(tag) + ", outside [-1, " +
             std::to_string(e.total_rows()) + ")");
    }
    if (tag >= 0 && set_of_row(tag, e.num_sets()) != s / W) {
      c.fail("tags: " + slot + " holds row " + std::to_string(tag) + ", which belongs to set " +
             std::to_string(set_of_row(tag, e.num_sets())));
    }
    if (tag >= 0) {
      for (index_t o = s / W * W; o < s; ++o) {
        index_t other;
        std::memcpy(&other, payload[2] + o * 8, 8);
        if (other == tag) c.fail("tags: row " + std::to_string(tag) + " is held by two slots of one set");
      }
    }
    if (dirty > 1 || (dirty == 1 && tag < 0)) {
      c.fail("dirty: " + slot + " has dirty = " + std::to_string(dirty) + (tag < 0 ? " but is empty" : ""));
    }
    if (last > populate_counter) {
      c.fail("last_use: " + slot + " = " + std::to_string(last) +
             " is after populate_counter = " + std::to_string(populate_counter));
    }
  }
  if (slots > 0) {
    std::vector<std::uint32_t> words(static_cast<std::size_t>(policy_words));
    if (!words.empty()) {  // Lru and DirectMapped keep no words: words.data() may be null
      std::memcpy(words.data(), payload[fmt::kPolicySection], words.size() * 4);
    }
    std::vector<std::int64_t> tags(static_cast<std::size_t>(slots));
    std::memcpy(tags.data(), payload[2], tags.size() * 8);
    if (const std::string why = C::check_meta(words.data(), tags.data(), slots); !why.empty()) {
      c.fail("section " + quote(fmt::policy_section_name(version, C::name)) + ": " + why);
    }
  }
  const std::uint64_t period = std::max<std::uint64_t>(C::decay_period(slots), 1);
  if (decay_clock >= period) {
    c.fail((version >= 3 ? "decay_clock = " : "sketch_increments = ") + std::to_string(decay_clock) +
           " must be below " + std::to_string(period));
  }
}

/// Every store row decodes to finite values within Storage::limit (its padding zeros), every
/// occupied cache row is finite and within it, and every optimizer state value is in its
/// kind's domain. Fails naming section, row (or slot) and value.
template <class E, class Cursor>
void check_values(const E& e, const Cursor& c, const std::uint8_t* const* payload,
                  const std::string& opt_name) {
  using S = typename E::storage_type;
  const std::int32_t D = e.config().dim;
  const auto holds = [](float x) { return num::is_finite(x) && x <= S::limit && x >= -S::limit; };
  const std::string range = std::string(S::name) + " holds finite values within +-" + format_float(S::limit);
  const std::size_t fs = e.state_row_bytes();
  for (index_t r = 0; r < e.total_rows(); ++r) {
    // A row's padding is zeros (every store writes its data bytes only; save() writes no
    // slot index entry): anything else is not a checkpoint of this layout.
    const std::uint8_t* row = payload[0] + static_cast<std::size_t>(r) * fs;
    if (const std::string why = state_row_fault<S>(row, D, fs); !why.empty()) {
      c.fail("section 'store': row " + std::to_string(r) + " " + why);
    }
  }
  for (index_t s = 0; s < e.cache_slots(); ++s) {
    index_t tag;
    std::memcpy(&tag, payload[2] + s * 8, 8);
    if (tag < 0) continue;  // an empty slot's row is never read
    for (std::int32_t d = 0; d < D; ++d) {
      float x;
      std::memcpy(&x, payload[1] + (static_cast<std::size_t>(s) * D + d) * 4, 4);
      if (!holds(x)) {
        c.fail("section 'cache_rows': slot " + std::to_string(s) + " (row " + std::to_string(tag) +
               ") element " + std::to_string(d) + " = " + format_float(x) + "; cached rows of " + range);
      }
    }
  }
  if (opt_name.empty()) return;
  using P = typename E::state_precision;
  KnownOptimizers::visit(opt_name, [&]<class Opt>() {
    using Rule = OptimizerRule<Opt>;
    const auto S = static_cast<std::size_t>(Rule::state_floats(D));
    if (S == 0) return;
    std::vector<float> st(S);
    const auto refuse = [&](const std::string& where) {
      std::string v;
      for (std::size_t k = 0; k < S && k < 8; ++k) v += (k ? ", " : "") + format_float(st[k]);
      if (S > 8) v += ", ...";
      c.fail(where + " holds " + Rule::name + " state [" + v + "]; it must be " + Rule::state_domain);
    };
    for (index_t r = 0; r < e.total_rows(); ++r) {  // decoded from the file's precision (P's)
      const std::uint8_t* row = payload[6] + static_cast<std::size_t>(r) * S * P::value_bytes;
      for (std::size_t k = 0; k < S; ++k)
        st[k] = num::decode_state(P::format, row, static_cast<std::int64_t>(k));
      if (!Rule::state_ok(st.data(), D)) refuse("section 'optimizer': row " + std::to_string(r));
    }
    // From version 3, compact precisions: the FP32 state of the occupied cache slots (a
    // constexpr branch: with FP32 state nvcc would flag the loop as unreachable).
    if constexpr (P::cached) {
      if (payload[io::checkpoint::kOptimizerCacheSection] == nullptr) return;
      for (index_t s = 0; s < e.cache_slots(); ++s) {
        index_t tag;
        std::memcpy(&tag, payload[2] + s * 8, 8);
        if (tag < 0) continue;  // an empty slot's state is never read
        std::memcpy(st.data(),
                    payload[io::checkpoint::kOptimizerCacheSection] + static_cast<std::size_t>(s) * S * 4,
                    S * 4);
        if (!Rule::state_ok(st.data(), D)) {
          refuse("section 'optimizer_cache': slot " + std::to_string(s) + " (row " + std::to_string(tag) +
                 ")");
        }
      }
    }
  });
}

/// load(): the pending_batch payload is one batch of valid CSR input for e's tables;
/// returns its indices and offsets.
template <class E, class Cursor>
void check_pending(const E& e, const Cursor& c, const std::uint8_t* p, std::uint64_t len,
                   std::vector<std::int64_t>& indices, std::vector<std::int64_t>& offsets) {
  const std::string sec = "section 'pending_batch': ";
  if (len < 16 || (len - 16) % 8 != 0) c.fail(sec + "length " + std::to_string(len) + " is not 16 + 8k");
  std::int64_t n, B;
  std::memcpy(&n, p, 8);
  std::memcpy(&B, p + 8, 8);
  const std::uint64_t words = (len - 16) / 8;  // n + T*B + 1
  const auto T = static_cast<std::uint64_t>(e.num_tables());
  if (n < 0 || B < 0 || static_cast<std::uint64_t>(n) >= words || static_cast<std::uint64_t>(B) > words / T ||
      (words - static_cast<std::uint64_t>(n) - 1) != T * static_cast<std::uint64_t>(B)) {
    c.fail(sec + "n = " + std::to_string(n) + ", B = " + std::to_string(B) + " do not match its " +
           std::to_string(words) + " entries (n + T*B + 1 with T = " + std::to_string(T) + ")");
  }
  indices.resize(static_cast<std::size_t>(n));
  offsets.resize(static_cast<std::size_t>(words) - indices.size());
  if (!indices.empty()) std::memcpy(indices.data(), p + 16, indices.size() * 8);  // n = 0: data() may be null
  std::memcpy(offsets.data(), p + 16 + indices.size() * 8, offsets.size() * 8);
  if (const std::string why = csr_batch_fault(e.config().table_rows, indices, offsets); !why.empty()) {
    c.fail(sec + why);
  }
}

}  // namespace mpe::detail::ckpt
