// SPDX-License-Identifier: Apache-2.0
/// @file mpe/detail/embedding/tiered_rows.inl
/// @brief TieredRows' member bodies: construction, map / lookup, the decay, the hot-id
/// index, and the MPETIER1 bytes (included by mpe/embedding/tiered_rows.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mpe/detail/io/bytes.hpp"

namespace mpe {

namespace detail::tiered {

inline constexpr char kMagic[8] = {'M', 'P', 'E', 'T', 'I', 'E', 'R', '1'};
inline constexpr std::uint32_t kVersion = 2;
inline constexpr std::size_t kHeaderBytes = 84;  // up to the sketch
inline constexpr std::uint64_t kSaltMix = 0x9e3779b97f4a7c15ull;

[[noreturn]] inline void invalid(const char* field, const std::string& value, const std::string& rule) {
  throw std::invalid_argument(std::string("mpe::TieredRows: TieredRowsConfig::") + field + " = " + value +
                              " must be " + rule);
}

// A counter += n, saturating at INT64_MAX (a loaded state's counters may be anywhere in
// [0, INT64_MAX]).
inline void bump(std::int64_t& c, std::int64_t n = 1) { c = c > INT64_MAX - n ? INT64_MAX : c + n; }

// One hot id as MPETIER1 stores it.
struct HotEntry {
  std::int64_t id = 0;
  std::int32_t row = 0;
  std::uint32_t count = 0;
};

}  // namespace detail::tiered

inline TieredRowsConfig TieredRows::resolve(const TieredRowsConfig& config) {
  using detail::tiered::invalid;
  TieredRowsConfig c = config;
  constexpr std::int64_t kMaxPhysical = std::int64_t{1} << 62;
  if (c.ids < 1) invalid("ids", std::to_string(c.ids), ">= 1");
  if (c.private_rows < 0 || c.private_rows > c.ids || c.private_rows > std::int64_t{0x7fffffff})
    invalid("private_rows", std::to_string(c.private_rows), "in [0, min(ids, 2^31 - 1)]");
  if (c.shared_rows < 1 || c.shared_rows > kMaxPhysical - c.private_rows)
    invalid("shared_rows", std::to_string(c.shared_rows), "in [1, 2^62 - private_rows]");
  if (c.promote_at < 1 || c.promote_at > 255)
    invalid("promote_at", std::to_string(c.promote_at),
            "in [1, 255] (the sketch's u8 counters saturate at 255)");
  if (c.demote_below > c.promote_at)
    invalid("demote_below", std::to_string(c.demote_below),
            "<= promote_at (" + std::to_string(c.promote_at) + ")");
  if (c.decay_every < 0) invalid("decay_every", std::to_string(c.decay_every), ">= 0");
  if (c.sketch_width != 0 && (c.sketch_width < 1 || c.sketch_width > (std::int64_t{1} << 30) ||
                              !std::has_single_bit(static_cast<std::uint64_t>(c.sketch_width))))
    invalid("sketch_width", std::to_string(c.sketch_width), "0 or a power of two in [1, 2^30]");
  const std::int64_t p = c.private_rows;
  if (c.decay_every == 0) c.decay_every = 10 * std::max<std::int64_t>(p, 16);
  if (c.sketch_width == 0)
    c.sketch_width =
        static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max<std::int64_t>(64, p))));
  return c;
}

inline std::size_t TieredRows::planned_memory_bytes(const TieredRowsConfig& config) {
  const TieredRowsConfig c = resolve(config);
  const auto p = static_cast<std::size_t>(c.private_rows);
  const std::size_t index = p > 0 ? static_cast<std::size_t>(std::bit_ceil(std::uint64_t{2} * p)) : 0;
  return static_cast<std::size_t>(SketchRef::depth * c.sketch_width) * sizeof(std::uint8_t) +
         p * (sizeof(std::int64_t) + sizeof(std::uint32_t)) + index * sizeof(std::int32_t);
}

inline TieredRows::TieredRows(const TieredRowsConfig& config) : cfg_(resolve(config)) {
  const std::int64_t p = cfg_.private_rows;
  sketch_salt_ = static_cast<std::int64_t>(mix64(cfg_.seed ^ detail::tiered::kSaltMix));
  sketch_.assign(static_cast<std::size_t>(SketchRef::depth * cfg_.sketch_width), std::uint8_t{0});
  owner_.assign(static_cast<std::size_t>(p), -1);
  count_.assign(static_cast<std::size_t>(p), 0u);
  index_.assign(p > 0 ? static_cast<std::size_t>(std::bit_ceil(static_cast<std::uint64_t>(2 * p))) : 0, -1);
  lowest_free_ = 0;
  moves_.reserve(static_cast<std::size_t>(p));
}

inline std::int64_t TieredRows::find(std::int64_t id) const {
  if (index_.empty()) return -1;
  const std::uint64_t mask = index_.size() - 1;
  for (std::uint64_t i = mix64(static_cast<std::uint64_t>(id)) & mask;; i = (i + 1) & mask) {
    const std::int32_t r = index_[i];
    if (r < 0) return -1;
    if (owner_[static_cast<std::size_t>(r)] == id) return r;
  }
}

inline std::uint64_t TieredRows::find_slot(std::int64_t id) const {
  const std::uint64_t mask = index_.size() - 1;
  std::uint64_t i = mix64(static_cast<std::uint64_t>(id)) & mask;
  while (owner_[static_cast<std::size_t>(index_[i])] != id) i = (i + 1) & mask;
  return i;
}

inline void TieredRows::insert(std::int32_t row) {
  const std::uint64_t mask = index_.size() - 1;
  std::uint64_t i = mix64(static_cast<std::uint64_t>(owner_[static_cast<std::size_t>(row)])) & mask;
  while (index_[i] >= 0) i = (i + 1) & mask;
  index_[i] = row;
}

// Linear probing's backward-shift deletion: later entries of the probe run move up so that
// every entry stays reachable from its home slot.
inline void TieredRows::erase_slot(std::uint64_t slot) {
  const std::uint64_t mask = index_.size() - 1;
  std::uint64_t hole = slot;
  for (std::uint64_t j = (hole + 1) & mask; index_[j] >= 0; j = (j + 1) & mask) {
    const std::uint64_t home =
        mix64(static_cast<std::uint64_t>(owner_[static_cast<std::size_t>(index_[j])])) & mask;
    // Entry j may fill the hole when its home is not in the cyclic range (hole, j].
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole] = -1;
}

inline void TieredRows::check_ids(std::span<const std::int64_t> ids, std::span<std::int64_t> rows,
                                  const char* fn) const {
  if (rows.size() != ids.size())
    throw std::invalid_argument(std::string("mpe::TieredRows::") + fn +
                                ": rows.size() = " + std::to_string(rows.size()) +
                                " differs from ids.size() = " + std::to_string(ids.size()));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= cfg_.ids)
      throw std::out_of_range(std::string("mpe::TieredRows::") + fn + ": ids[" + std::to_string(i) + "] = " +
                              std::to_string(ids[i]) + " outside [0, " + std::to_string(cfg_.ids) + ")");
  }
}

inline void TieredRows::decay() {
  for (std::uint8_t& c : sketch_) c = static_cast<std::uint8_t>(c >> 1);
  // Each hot id is halved and, below demote_below, demoted on its own: the set demoted does
  // not depend on the order of the rows or of the index.
  for (std::size_t r = 0; r < owner_.size(); ++r) {
    if (owner_[r] < 0) continue;
    count_[r] >>= 1;
    if (count_[r] >= cfg_.demote_below) continue;
    erase_slot(find_slot(owner_[r]));
    owner_[r] = -1;
    count_[r] = 0;
    --hot_count_;
    lowest_free_ = std::min(lowest_free_, static_cast<std::int64_t>(r));
    detail::tiered::bump(stats_.demotions);
  }
  detail::tiered::bump(stats_.decays);
  decay_clock_ = 0;
}

inline void TieredRows::map(std::span<const std::int64_t> ids, std::span<std::int64_t> rows) {
  check_ids(ids, rows, "map");
  if (decay_clock_ >= cfg_.decay_every) decay();
  moves_.clear();
  scratch_.assign(ids.begin(), ids.end());
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  const SketchRef sk{nullptr, cfg_.sketch_width};  // the cell formula only (u8 counters here)
  const std::int64_t p = cfg_.private_rows;
  for (const std::int64_t id : scratch_) {
    const std::int64_t hot = find(id);
    if (hot >= 0) {
      std::uint32_t& n = count_[static_cast<std::size_t>(hot)];
      if (n != 0xffffffffu) ++n;
      continue;
    }
    const std::int64_t key = sketch_key(id);
    std::uint32_t est = 255;
    for (int k = 0; k < SketchRef::depth; ++k) {
      std::uint8_t& c = sketch_[static_cast<std::size_t>(sk.cell(key, k))];
      if (c != 255) ++c;
      est = std::min<std::uint32_t>(est, c);
    }
    if (est < cfg_.promote_at) continue;
    if (lowest_free_ >= p) {
      detail::tiered::bump(stats_.refused_promotions);
      continue;
    }
    const auto row = static_cast<std::int32_t>(lowest_free_);
    owner_[static_cast<std::size_t>(row)] = id;
    count_[static_cast<std::size_t>(row)] = est;
    insert(row);
    ++hot_count_;
    while (lowest_free_ < p && owner_[static_cast<std::size_t>(lowest_free_)] >= 0) ++lowest_free_;
    moves_.push_back(Move{id, shared_row_of(id), row});
    detail::tiered::bump(stats_.promotions);
  }
  decay_clock_ += static_cast<std::int64_t>(scratch_.size());
  std::int64_t n_private = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t hot = find(ids[i]);
    n_private += hot >= 0;
    rows[i] = hot >= 0 ? hot : shared_row_of(ids[i]);
  }
  const auto n = static_cast<std::int64_t>(ids.size());
  detail::tiered::bump(stats_.private_lookups, n_private);
  detail::tiered::bump(stats_.shared_lookups, n - n_private);
  detail::tiered::bump(stats_.lookups, n);
}

inline void TieredRows::lookup(std::span<const std::int64_t> ids, std::span<std::int64_t> rows) const {
  check_ids(ids, rows, "lookup");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t hot = find(ids[i]);
    rows[i] = hot >= 0 ? hot : shared_row_of(ids[i]);
  }
}

inline std::int64_t TieredRows::row_of(std::int64_t id) const {
  if (id < 0 || id >= cfg_.ids)
    throw std::out_of_range("mpe::TieredRows::row_of: id = " + std::to_string(id) + " outside [0, " +
                            std::to_string(cfg_.ids) + ")");
  const std::int64_t hot = find(id);
  return hot >= 0 ? hot : shared_row_of(id);
}

template <class Get, class Set>
void TieredRows::copy_moved_rows(std::int64_t dim, std::int64_t table_first_row, Get&& get, Set&& set) const {
  if (dim < 1)
    throw std::invalid_argument("mpe::TieredRows::copy_moved_rows: dim = " + std::to_string(dim) +
                                " must be >= 1");
  if (table_first_row < 0)
    throw std::invalid_argument("mpe::TieredRows::copy_moved_rows: table_first_row = " +
                                std::to_string(table_first_row) + " must be >= 0");
  std::vector<float> buf(static_cast<std::size_t>(dim));
  for (const Move& m : moves_) {
    get(std::span<float>(buf), table_first_row + m.from_row);
    set(std::span<const float>(buf), table_first_row + m.to_row);
  }
}

inline std::size_t TieredRows::memory_bytes() const {
  return sketch_.size() * sizeof(std::uint8_t) + owner_.size() * sizeof(std::int64_t) +
         count_.size() * sizeof(std::uint32_t) + index_.size() * sizeof(std::int32_t);
}

inline std::vector<std::uint8_t> TieredRows::save_bytes() const {
  namespace t = detail::tiered;
  std::vector<t::HotEntry> hot;
  std::vector<std::int32_t> fr;  // ascending
  hot.reserve(static_cast<std::size_t>(hot_count_));
  for (std::size_t r = 0; r < owner_.size(); ++r) {
    if (owner_[r] >= 0)
      hot.push_back({owner_[r], static_cast<std::int32_t>(r), count_[r]});
    else
      fr.push_back(static_cast<std::int32_t>(r));
  }
  std::sort(hot.begin(), hot.end(), [](const t::HotEntry& a, const t::HotEntry& b) { return a.id < b.id; });
  detail::ckpt::Bytes w;
  w.v.reserve(t::kHeaderBytes + sketch_.size() + 16 + hot.size() * 16 + fr.size() * 4 + 60);
  w.raw(t::kMagic, sizeof t::kMagic);
  w.put(t::kVersion);
  w.put(std::uint64_t{0});  // total_bytes, patched below
  w.put(cfg_.ids);
  w.put(cfg_.private_rows);
  w.put(cfg_.shared_rows);
  w.put(cfg_.promote_at);
  w.put(cfg_.demote_below);
  w.put(cfg_.decay_every);
  w.put(cfg_.sketch_width);
  w.put(cfg_.seed);
  w.put(decay_clock_);
  w.raw(sketch_.data(), sketch_.size());
  w.put(static_cast<std::int64_t>(hot.size()));
  for (const t::HotEntry& s : hot) {
    w.put(s.id);
    w.put(s.row);
    w.put(s.count);
  }
  w.put(static_cast<std::int64_t>(fr.size()));
  for (std::int32_t r : fr) w.put(r);
  for (std::int64_t x : {stats_.lookups, stats_.private_lookups, stats_.shared_lookups, stats_.promotions,
                         stats_.demotions, stats_.decays, stats_.refused_promotions})
    w.put(x);
  const std::uint64_t total = w.v.size() + 4;
  std::memcpy(w.v.data() + 12, &total, 8);
  w.put(io::checkpoint::crc32c(w.v.data(), w.v.size()));
  return std::move(w.v);
}

inline void TieredRows::load_bytes(std::span<const std::uint8_t> bytes) {
  namespace t = detail::tiered;
  const std::string prefix = "mpe::TieredRows::load_bytes: ";
  detail::ckpt::Cursor r{bytes.data(), bytes.size(), 0, bytes.size(), prefix};
  if (bytes.size() < t::kHeaderBytes + 4)
    r.fail("truncated: " + std::to_string(bytes.size()) + " bytes, less than the header's " +
           std::to_string(t::kHeaderBytes + 4));
  if (std::memcmp(r.take(8, "magic"), t::kMagic, 8) != 0) r.fail("magic is not MPETIER1");
  const auto version = r.get<std::uint32_t>("version");
  if (version == 1) r.fail("version 1 (u32 sketch counters) is not read; this build reads version 2 only");
  if (version != t::kVersion) r.fail("version " + std::to_string(version) + " is not 2");
  const auto total = r.get<std::uint64_t>("total_bytes");
  if (total != bytes.size())
    r.fail("truncated or extended: " + std::to_string(bytes.size()) + " bytes, total_bytes says " +
           std::to_string(total));
  std::uint32_t crc;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  const std::uint32_t want = io::checkpoint::crc32c(bytes.data(), bytes.size() - 4);
  if (crc != want)
    r.fail("CRC-32C mismatch (stored " + std::to_string(crc) + ", computed " + std::to_string(want) + ")");
  r.end = r.file_size = bytes.size() - 4;  // the fields end before the CRC
  const auto same = [&r](const char* field, auto file, auto mine) {
    if (file != mine)
      r.fail("config field " + std::string(field) + " = " + std::to_string(file) +
             " differs from this object's " + std::to_string(mine));
  };
  same("ids", r.get<std::int64_t>("ids"), cfg_.ids);
  same("private_rows", r.get<std::int64_t>("private_rows"), cfg_.private_rows);
  same("shared_rows", r.get<std::int64_t>("shared_rows"), cfg_.shared_rows);
  same("promote_at", r.get<std::uint32_t>("promote_at"), cfg_.promote_at);
  same("demote_below", r.get<std::uint32_t>("demote_below"), cfg_.demote_below);
  same("decay_every", r.get<std::int64_t>("decay_every"), cfg_.decay_every);
  same("sketch_width", r.get<std::int64_t>("sketch_width"), cfg_.sketch_width);
  same("seed", r.get<std::uint64_t>("seed"), cfg_.seed);
  const auto clock = r.get<std::int64_t>("decay_clock");
  if (clock < 0) r.fail("decay_clock = " + std::to_string(clock) + " is negative");
  std::vector<std::uint8_t> sketch(sketch_.size());
  std::memcpy(sketch.data(), r.take(sketch.size(), "sketch"), sketch.size());
  const std::int64_t p = cfg_.private_rows;
  const auto n_hot = r.get<std::int64_t>("n_hot");
  if (n_hot < 0 || n_hot > p)
    r.fail("n_hot = " + std::to_string(n_hot) + " outside [0, " + std::to_string(p) + "]");
  std::vector<std::uint8_t> used(static_cast<std::size_t>(p), 0);
  std::vector<t::HotEntry> hot(static_cast<std::size_t>(n_hot));
  for (std::int64_t i = 0; i < n_hot; ++i) {
    t::HotEntry& s = hot[static_cast<std::size_t>(i)];
    s.id = r.get<std::int64_t>("hot id");
    s.row = r.get<std::int32_t>("hot row");
    s.count = r.get<std::uint32_t>("hot count");
    const std::string who = "hot entry " + std::to_string(i) + " (id " + std::to_string(s.id) + ")";
    if (s.id < 0 || s.id >= cfg_.ids) r.fail(who + ": id outside [0, " + std::to_string(cfg_.ids) + ")");
    if (i > 0 && s.id <= hot[static_cast<std::size_t>(i - 1)].id)
      r.fail(who + ": duplicate or unsorted hot id (previous " +
             std::to_string(hot[static_cast<std::size_t>(i - 1)].id) + ")");
    if (s.row < 0 || s.row >= p)
      r.fail(who + ": row " + std::to_string(s.row) + " outside [0, private_rows = " + std::to_string(p) +
             ")");
    if (used[static_cast<std::size_t>(s.row)]) r.fail(who + ": duplicate row " + std::to_string(s.row));
    // A hot id starts at its estimate (>= promote_at >= demote_below), only grows between
    // decays and is demoted at a decay once below demote_below.
    if (s.count < cfg_.demote_below)
      r.fail(who + ": count " + std::to_string(s.count) +
             " below demote_below = " + std::to_string(cfg_.demote_below));
    used[static_cast<std::size_t>(s.row)] = 1;
  }
  const auto n_free = r.get<std::int64_t>("n_free");
  if (n_free != p - n_hot)
    r.fail("n_free = " + std::to_string(n_free) +
           " is not private_rows - n_hot = " + std::to_string(p - n_hot));
  std::vector<std::int32_t> fr(static_cast<std::size_t>(n_free));  // checked; its first is lowest_free_
  for (std::int64_t i = 0; i < n_free; ++i) {
    const auto row = r.get<std::int32_t>("free row");
    const std::string who = "free row " + std::to_string(i) + " = " + std::to_string(row);
    if (row < 0 || row >= p) r.fail(who + " outside [0, private_rows = " + std::to_string(p) + ")");
    if (i > 0 && row <= fr[static_cast<std::size_t>(i - 1)]) r.fail(who + ": duplicate or unsorted");
    if (used[static_cast<std::size_t>(row)]) r.fail(who + ": also a hot id's row");
    fr[static_cast<std::size_t>(i)] = row;
  }
  TieredRowsStats st;
  const char* stat_names[] = {"lookups",   "private_lookups", "shared_lookups",    "promotions",
                              "demotions", "decays",          "refused_promotions"};
  std::int64_t* stat_fields[] = {&st.lookups,   &st.private_lookups, &st.shared_lookups,    &st.promotions,
                                 &st.demotions, &st.decays,          &st.refused_promotions};
  for (int i = 0; i < 7; ++i) {
    *stat_fields[i] = r.get<std::int64_t>(stat_names[i]);
    if (*stat_fields[i] < 0)
      r.fail(std::string("stats ") + stat_names[i] + " = " + std::to_string(*stat_fields[i]) +
             " is negative");
  }
  if (r.pos != r.end)
    r.fail(std::to_string(r.end - r.pos) + " bytes after the stats (the sizes do not add up to total_bytes)");
  // Verified: replace the state (nothing below throws but allocation).
  std::vector<std::int64_t> owner(owner_.size(), -1);
  std::vector<std::uint32_t> count(count_.size(), 0u);
  std::vector<std::int32_t> index(index_.size(), -1);
  for (const t::HotEntry& s : hot) {
    owner[static_cast<std::size_t>(s.row)] = s.id;
    count[static_cast<std::size_t>(s.row)] = s.count;
  }
  sketch_.swap(sketch);
  owner_.swap(owner);
  count_.swap(count);
  index_.swap(index);
  for (const t::HotEntry& s : hot) insert(s.row);
  hot_count_ = n_hot;
  lowest_free_ = fr.empty() ? p : fr.front();
  decay_clock_ = clock;
  stats_ = st;
  moves_.clear();
}

}  // namespace mpe
