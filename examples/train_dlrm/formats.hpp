// Public CTR text formats besides Criteo's (--format libsvm | libfm | avazu): line parsers
// into a format-neutral sample (a list of (table, key, weight) features), and the row
// scheme of their categorical keys. The streaming reader and the batch source are in
// ctr_source.hpp.
//
//   libsvm  `label feature:value ...`        one table (every feature of a sample in one bag)
//                                            or, with --field-bounds B1,...,Bk, k + 1 tables
//                                            by feature id range
//   libfm   `label field:feature:value ...`  (libffm's field-aware triples) table = field
//   avazu   Kaggle Avazu CSV                 label = click, one table per other column but
//                                            id; hour (YYMMDDHH) -> hour of day HH
// Labels: 0/1, and -1/+1 read as 0/1. Values: finite numbers, the feature's per-sample
// weight in its table's bag (sum pooling). A table without a feature in a sample gets its
// missing row 0 (weight 1), as an empty Criteo field.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "hash.hpp"
#include "text.hpp"

namespace dlrm {

enum class Format { Criteo, Libsvm, Libfm, Avazu };

// "criteo" | "libsvm" | "libfm" (also "libffm") | "avazu"; throws std::invalid_argument.
inline Format parse_format(const std::string& s) {
  if (s == "criteo") return Format::Criteo;
  if (s == "libsvm") return Format::Libsvm;
  if (s == "libfm" || s == "libffm") return Format::Libfm;
  if (s == "avazu") return Format::Avazu;
  throw std::invalid_argument("--format must be criteo, libsvm, libfm or avazu, not '" + s + "'");
}
inline const char* format_name(Format f) {
  switch (f) {
    case Format::Criteo:
      return "criteo";
    case Format::Libsvm:
      return "libsvm";
    case Format::Libfm:
      return "libfm";
    case Format::Avazu:
      return "avazu";
  }
  return "?";
}

// At most this many tables (libfm fields): the interaction grows with T^2.
inline constexpr int kMaxCtrTables = 256;

struct CtrFeature {
  int table = 0;
  std::uint64_t key = 0;  // libsvm/libfm: the feature id; avazu: fnv1a64 of the value (hour: HH)
  float weight = 1;
};

struct CtrSample {
  float label = 0;
  std::vector<CtrFeature> feats;  // in line order; a table may appear 0, 1 or more times
};

// Row of key `key` in table `table` of `rows` rows (>= 2): row 0 is the table's missing
// row, a present key goes to 1 + hash_combine(table, key) % (rows - 1) (hashing, as the
// Criteo reader's criteo_row: distinct keys may collide; the same key in two tables lands on
// unrelated rows).
constexpr std::int64_t category_row(int table, std::uint64_t key, std::int64_t rows) noexcept {
  return 1 + static_cast<std::int64_t>(hash_combine(static_cast<std::uint64_t>(table), key) %
                                       static_cast<std::uint64_t>(rows - 1));
}

// FNV-1a, 64 bits: an Avazu value's key.
constexpr std::uint64_t fnv1a64(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace detail_fmt {

inline std::string quoted(std::string_view v) { return quote_token(v); }

// ASCII case-insensitive equality (Avazu's header names).
inline bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto lower = [](char c) {
             return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
           };
           return lower(x) == lower(y);
         });
}

// Label token: 0 or 1, -1 read as 0 and +1 as 1.
inline std::string parse_label(std::string_view v, float& y) {
  if (v == "1" || v == "+1")
    y = 1;
  else if (v == "0" || v == "-1")
    y = 0;
  else
    return "label must be 0 or 1 (or -1/+1), got " + quoted(v);
  return {};
}

inline bool parse_u64(std::string_view v, std::uint64_t& x) {
  if (v.empty()) return false;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  return ec == std::errc{} && p == v.data() + v.size();
}

inline bool parse_value(std::string_view v, float& x) {
  if (v.empty()) return false;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  return ec == std::errc{} && p == v.data() + v.size() && std::isfinite(x);
}

inline bool is_space(char c) { return c == ' ' || c == '\t'; }

// Splits on runs of spaces/tabs.
inline void split_ws(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
}

inline std::string_view chomp(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace detail_fmt

// libsvm tables: one (no bounds) or, with strictly increasing bounds B1 < ... < Bk, table 0
// = ids below B1, table j = ids in [Bj, Bj+1), table k = ids from Bk on.
struct LibsvmFields {
  std::vector<std::uint64_t> bounds;
  int tables() const { return static_cast<int>(bounds.size()) + 1; }
  int table_of(std::uint64_t id) const {
    return static_cast<int>(std::upper_bound(bounds.begin(), bounds.end(), id) - bounds.begin());
  }
  // Throws std::invalid_argument naming --field-bounds unless strictly increasing and at
  // most kMaxCtrTables tables.
  void check() const {
    for (std::size_t i = 1; i < bounds.size(); ++i)
      if (bounds[i] <= bounds[i - 1])
        throw std::invalid_argument("--field-bounds must increase strictly: " +
                                    std::to_string(bounds[i - 1]) + " then " + std::to_string(bounds[i]));
    if (tables() > kMaxCtrTables)
      throw std::invalid_argument("--field-bounds gives " + std::to_string(tables()) + " tables; at most " +
                                  std::to_string(kMaxCtrTables));
  }
};

// --field-bounds "B1,...,Bk": each item a non-negative decimal integer below 2^64 (no sign,
// no empty item). Throws std::invalid_argument naming the item as given; the order is
// LibsvmFields::check()'s.
inline std::vector<std::uint64_t> parse_field_bounds(std::string_view text) {
  std::vector<std::uint64_t> out;
  std::size_t start = 0;
  for (int item = 1;; ++item) {
    const auto comma = text.find(',', start);
    const std::string_view v =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string head = "--field-bounds item " + std::to_string(item) + " ";
    if (v.empty()) throw std::invalid_argument(head + "is empty (give B1,...,Bk, e.g. 100,200)");
    std::uint64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec == std::errc::result_out_of_range)
      throw std::invalid_argument(head + detail_fmt::quoted(v) + " does not fit in 64 bits");
    if (ec != std::errc{} || p != v.data() + v.size() || v.front() == '+')
      throw std::invalid_argument(head + detail_fmt::quoted(v) + " is not a non-negative integer");
    out.push_back(x);
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

namespace detail_fmt {
// The frame of a libsvm / libfm line: splits it, reads the label (token 1) and calls
// feature(token, f) for each later token, which fills f or returns why not; the reason is
// prefixed with the token's place and text only when there is one (not per token).
template <class Feature>
std::string parse_feature_line(std::string_view line, CtrSample& s, std::vector<std::string_view>& tok,
                               Feature&& feature) {
  split_ws(chomp(line), tok);
  if (tok.empty()) return "empty line";
  if (auto why = parse_label(tok[0], s.label); !why.empty()) return why;
  s.feats.clear();
  for (std::size_t i = 1; i < tok.size(); ++i) {
    CtrFeature f;
    if (std::string why = feature(tok[i], f); !why.empty())
      return "token " + std::to_string(i + 1) + " " + quoted(tok[i]) + ": " + why;
    s.feats.push_back(f);
  }
  return {};
}
}  // namespace detail_fmt

// `label feature:value ...`. Returns an empty string on success, else the reason (naming
// the token: token 1 is the label).
inline std::string parse_libsvm_line(std::string_view line, const LibsvmFields& fields, CtrSample& s,
                                     std::vector<std::string_view>& tok) {
  using namespace detail_fmt;
  return parse_feature_line(line, s, tok, [&](std::string_view t, CtrFeature& f) -> std::string {
    const auto colon = t.find(':');
    if (colon == std::string_view::npos || t.find(':', colon + 1) != std::string_view::npos)
      return "expected feature:value";
    if (!parse_u64(t.substr(0, colon), f.key)) return "feature id is not a non-negative integer";
    if (!parse_value(t.substr(colon + 1), f.weight)) return "value is not a finite number";
    f.table = fields.table_of(f.key);
    return {};
  });
}

// `label field:feature:value ...` with fields 0 .. num_fields - 1.
inline std::string parse_libfm_line(std::string_view line, int num_fields, CtrSample& s,
                                    std::vector<std::string_view>& tok) {
  using namespace detail_fmt;
  return parse_feature_line(line, s, tok, [&](std::string_view t, CtrFeature& f) -> std::string {
    const auto c1 = t.find(':');
    const auto c2 = c1 == std::string_view::npos ? c1 : t.find(':', c1 + 1);
    if (c2 == std::string_view::npos || t.find(':', c2 + 1) != std::string_view::npos)
      return "expected field:feature:value";
    std::uint64_t field = 0;
    if (!parse_u64(t.substr(0, c1), field)) return "field is not a non-negative integer";
    if (field >= static_cast<std::uint64_t>(num_fields))
      return "field " + std::to_string(field) + " is not below " + std::to_string(num_fields) +
             (num_fields == kMaxCtrTables ? " (the most tables train_dlrm builds)"
                                          : " (the training data's fields)");
    if (!parse_u64(t.substr(c1 + 1, c2 - c1 - 1), f.key)) return "feature is not a non-negative integer";
    if (!parse_value(t.substr(c2 + 1), f.weight)) return "value is not a finite number";
    f.table = static_cast<int>(field);
    return {};
  });
}

// Avazu's columns: which one is the label, which are ignored (id), which is the hour; every
// other column is a table, in file order.
struct AvazuLayout {
  static constexpr const char* kKaggle[] = {"id",         "click",        "hour",         "C1",
                                            "banner_pos", "site_id",      "site_domain",  "site_category",
                                            "app_id",     "app_domain",   "app_category", "device_id",
                                            "device_ip",  "device_model", "device_type",  "device_conn_type",
                                            "C14",        "C15",          "C16",          "C17",
                                            "C18",        "C19",          "C20",          "C21"};
  std::vector<std::string> columns;      // every column's name
  std::vector<int> table_of;             // per column: its table, or -1 (id, click)
  std::vector<std::string> table_names;  // per table: its column's name ("hour" reads as hour of day)
  int label_col = -1, hour_col = -1;

  // From a header's names (id, click and hour matched in any case); throws
  // std::invalid_argument without a click column.
  static AvazuLayout from_names(std::vector<std::string> names) {
    AvazuLayout l;
    l.columns = std::move(names);
    for (std::size_t c = 0; c < l.columns.size(); ++c) {
      const std::string& n = l.columns[c];
      int t = -1;
      if (detail_fmt::iequals(n, "click"))
        l.label_col = static_cast<int>(c);
      else if (!detail_fmt::iequals(n, "id")) {
        if (detail_fmt::iequals(n, "hour")) l.hour_col = static_cast<int>(c);
        t = static_cast<int>(l.table_names.size());
        l.table_names.push_back(n);
      }
      l.table_of.push_back(t);
    }
    if (l.label_col < 0) throw std::invalid_argument("no 'click' column (the label)");
    if (l.table_names.empty()) throw std::invalid_argument("no categorical column");
    if (static_cast<int>(l.table_names.size()) > kMaxCtrTables)
      throw std::invalid_argument(std::to_string(l.table_names.size()) + " categorical columns; at most " +
                                  std::to_string(kMaxCtrTables));
    return l;
  }
  // Kaggle's train.csv layout (a file without a header line).
  static AvazuLayout kaggle() { return from_names({std::begin(kKaggle), std::end(kKaggle)}); }
  int tables() const { return static_cast<int>(table_names.size()); }
};

inline void split_commas(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    out.push_back(
        line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
}

// A header line: its first column is "id" (in any case).
inline bool is_avazu_header(std::string_view line) {
  line = detail_fmt::chomp(line);
  return detail_fmt::iequals(line.substr(0, line.find(',')), "id");
}

// One Avazu data line. An empty value is the table's missing row; hour must be YYMMDDHH.
inline std::string parse_avazu_line(std::string_view line, const AvazuLayout& l, CtrSample& s,
                                    std::vector<std::string_view>& col) {
  using namespace detail_fmt;
  split_commas(chomp(line), col);
  if (col.size() != l.columns.size())
    return "expected " + std::to_string(l.columns.size()) + " comma-separated columns, got " +
           std::to_string(col.size());
  const std::string_view y = col[static_cast<std::size_t>(l.label_col)];
  if (y == "1")
    s.label = 1;
  else if (y == "0")
    s.label = 0;
  else
    return "column " + std::to_string(l.label_col + 1) + " (click) must be 0 or 1, got " + quoted(y);
  s.feats.clear();
  for (std::size_t c = 0; c < col.size(); ++c) {
    const int t = l.table_of[c];
    const std::string_view v = col[c];
    if (t < 0 || v.empty()) continue;
    CtrFeature f;
    f.table = t;
    if (static_cast<int>(c) == l.hour_col) {
      std::uint64_t hh = 0;
      if (v.size() != 8 || !parse_u64(v, hh) || hh % 100 > 23)
        return "column " + std::to_string(c + 1) + " (hour) is not YYMMDDHH: " + quoted(v);
      f.key = hh % 100;  // hour of day
    } else {
      f.key = fnv1a64(v);
    }
    s.feats.push_back(f);
  }
  return {};
}

}  // namespace dlrm
