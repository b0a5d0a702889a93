// Streaming reader, scan and batch source of the CTR formats of formats.hpp (libsvm,
// libfm, avazu): as the Criteo path of data.hpp, a blank line is skipped (no sample, not
// malformed), a UTF-8 byte order mark before the first line dropped, and a malformed line
// counted, the first few kept with their line numbers, and skipped (or, in strict mode,
// thrown as MalformedLine naming the file, the line and the token or column); table sizes come from one
// streaming pass over the training lines (rows = min(distinct keys + 1 missing row,
// --max-rows-per-table), at least 2), and keys map to rows by category_row().
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "data.hpp"
#include "formats.hpp"

namespace dlrm {

// What a CTR file's lines mean: the format and its table layout.
struct CtrSpec {
  Format format = Format::Libsvm;
  LibsvmFields fields;               // libsvm: the tables by feature id range
  int libfm_fields = kMaxCtrTables;  // libfm: fields must be below this (the training data's count)
};

// Streams one file of a CTR format; [first_line, last_line] limits the lines it returns
// (last_line 0 = to the end). An Avazu file's first line is its header when its first
// column is "id" in any case (then its names give the columns), else the file has Kaggle's train.csv
// layout; the header is read whatever the range.
class CtrReader {
 public:
  CtrReader(std::string path, CtrSpec spec, bool strict, std::uint64_t first_line = 1,
            std::uint64_t last_line = 0)
      : in_(std::move(path)), spec_(std::move(spec)), strict_(strict), first_(first_line), last_(last_line) {
    if (spec_.format == Format::Criteo)
      throw std::invalid_argument("CtrReader: Criteo files use CriteoReader");
    if (spec_.format != Format::Avazu) return;
    std::string_view line;
    if (!in_.next(line) || !is_avazu_header(line)) {
      layout_ = AvazuLayout::kaggle();
      if (in_.line_number() == 1) {  // a data line, returned first by next()
        first_line_ = std::string(line);
        first_is_data_ = true;
      }
      return;
    }
    header_ = true;
    std::vector<std::string_view> cols;
    split_commas(detail_fmt::chomp(line), cols);
    try {
      layout_ = AvazuLayout::from_names({cols.begin(), cols.end()});
    } catch (const std::invalid_argument& e) {
      throw DataError(in_.path() + ": line 1 (header): " + e.what());
    }
  }

  // Next valid sample in range; malformed lines are counted and skipped, blank ones skipped.
  bool next(CtrSample& s) {
    std::string_view line;
    while (true) {
      if (first_is_data_) {
        line = first_line_;
        first_is_data_ = false;
      } else {
        if (last_ != 0 && in_.line_number() >= last_) return false;
        if (!in_.next(line)) return false;
      }
      const std::uint64_t n = in_.line_number();
      if (n < first_ || is_blank_line(line)) continue;
      const std::string why = parse(line, s);
      if (why.empty()) return true;
      if (strict_) throw MalformedLine(in_.path() + ": line " + std::to_string(n) + ": " + why);
      bad_.add(n, why);
    }
  }

  int tables() const {
    switch (spec_.format) {
      case Format::Libsvm:
        return spec_.fields.tables();
      case Format::Libfm:
        return spec_.libfm_fields;
      default:
        return layout_.tables();
    }
  }
  bool has_header() const noexcept { return header_; }
  const AvazuLayout& layout() const noexcept { return layout_; }
  std::uint64_t line_number() const noexcept { return in_.line_number(); }
  const MalformedReport& malformed() const noexcept { return bad_; }
  const std::string& path() const noexcept { return in_.path(); }

 private:
  std::string parse(std::string_view line, CtrSample& s) {
    switch (spec_.format) {
      case Format::Libsvm:
        return parse_libsvm_line(line, spec_.fields, s, tok_);
      case Format::Libfm:
        return parse_libfm_line(line, spec_.libfm_fields, s, tok_);
      default:
        return parse_avazu_line(line, layout_, s, tok_);
    }
  }
  LineStream in_;
  CtrSpec spec_;
  bool strict_;
  std::uint64_t first_, last_;
  AvazuLayout layout_;
  bool header_ = false;
  std::string first_line_;  // Avazu: a first line that is data (not a header)
  bool first_is_data_ = false;
  std::vector<std::string_view> tok_;
  MalformedReport bad_;
};

// Whether an Avazu file starts with a header line (its first column is "id").
inline bool avazu_has_header(const std::string& path) {
  return CtrReader(path, CtrSpec{Format::Avazu, {}, kMaxCtrTables}, false).has_header();
}

struct CtrScan {
  std::uint64_t lines = 0;               // physical lines in range
  std::uint64_t valid = 0;               // parsed samples
  std::uint64_t positives = 0;           // label 1
  int tables = 0;                        // libfm: 1 + the largest field seen (at least 1)
  std::vector<std::uint64_t> distinct;   // per table: distinct keys, capped at max_distinct
  std::vector<std::string> table_names;  // avazu: the columns
  MalformedReport malformed;
};

// One streaming pass: counts and per-table cardinalities (each table's set stops growing at
// max_distinct).
inline CtrScan scan_ctr(const std::string& path, const CtrSpec& spec, std::uint64_t max_distinct, bool strict,
                        std::uint64_t first_line = 1, std::uint64_t last_line = 0) {
  CtrReader r(path, spec, strict, first_line, last_line);
  CtrScan out;
  std::vector<std::unordered_set<std::uint64_t>> seen(
      static_cast<std::size_t>(spec.format == Format::Libfm ? 1 : r.tables()));
  CtrSample s;
  while (r.next(s)) {
    ++out.valid;
    out.positives += s.label > 0.5f ? 1 : 0;
    for (const CtrFeature& f : s.feats) {
      const auto t = static_cast<std::size_t>(f.table);
      if (t >= seen.size()) seen.resize(t + 1);
      if (seen[t].size() < max_distinct) seen[t].insert(f.key);
    }
  }
  out.tables = static_cast<int>(seen.size());
  for (const auto& set : seen) out.distinct.push_back(set.size());
  if (spec.format == Format::Avazu) out.table_names = r.layout().table_names;
  out.lines = r.line_number() >= first_line ? r.line_number() - first_line + 1 : 0;
  out.malformed = r.malformed();
  return out;
}

// Table sizes: min(distinct keys + 1 missing row, max_rows), at least 2.
inline std::vector<std::int64_t> table_rows_from_ctr_scan(const CtrScan& s, std::int64_t max_rows) {
  std::vector<std::int64_t> rows;
  for (auto d : s.distinct)
    rows.push_back(
        std::max<std::int64_t>(2, std::min<std::int64_t>(static_cast<std::int64_t>(d) + 1, max_rows)));
  return rows;
}

// Batches of a CTR file: no dense features; bag (t, b) holds sample b's features of table t
// (in line order) at category_row(t, key, rows_t), weighted by their values (libsvm, libfm;
// Avazu's weights are all 1 and left empty), or the missing row 0 (weight 1) when it has none.
class CtrFileSource final : public BatchSource {
 public:
  // table_names: the training file's Avazu columns (a test file's must be the same).
  CtrFileSource(std::string path, CtrSpec spec, std::vector<std::int64_t> table_rows, bool strict,
                std::uint64_t first_line, std::uint64_t last_line, std::uint64_t expected,
                std::vector<std::string> table_names = {})
      : path_(std::move(path)),
        spec_(std::move(spec)),
        rows_(std::move(table_rows)),
        names_(std::move(table_names)),
        strict_(strict),
        first_(first_line),
        last_(last_line),
        expected_(expected) {
    reset();
  }
  void reset() override {
    reader_ = std::make_unique<CtrReader>(path_, spec_, strict_, first_, last_);
    if (reader_->tables() != static_cast<int>(rows_.size()))
      throw DataError("'" + path_ + "' has " + std::to_string(reader_->tables()) +
                      " tables, the training data " + std::to_string(rows_.size()));
    if (spec_.format == Format::Avazu && !names_.empty() && reader_->layout().table_names != names_)
      throw DataError("'" + path_ + "': its columns differ from the training data's");
  }
  bool next(Batch& b, int max_batch) override {
    const int T = static_cast<int>(rows_.size());
    if (pending_.size() < static_cast<std::size_t>(max_batch))
      pending_.resize(static_cast<std::size_t>(max_batch));
    int n = 0;
    while (n < max_batch && reader_->next(pending_[static_cast<std::size_t>(n)])) ++n;
    if (n == 0) return false;
    b.resize_bags(n, T, 0);
    // Bag sizes, then offsets (a bag without features holds the missing row).
    std::fill(b.offsets.begin(), b.offsets.end(), 0);
    for (int i = 0; i < n; ++i)
      for (const CtrFeature& f : pending_[static_cast<std::size_t>(i)].feats)
        ++b.offsets[static_cast<std::size_t>(f.table) * n + i + 1];
    for (std::size_t j = 1; j < b.offsets.size(); ++j) b.offsets[j] = std::max<std::int64_t>(b.offsets[j], 1);
    for (std::size_t j = 1; j < b.offsets.size(); ++j) b.offsets[j] += b.offsets[j - 1];
    const auto total = static_cast<std::size_t>(b.offsets.back());
    b.indices.assign(total, 0);
    const bool weighted = spec_.format != Format::Avazu;
    b.weights.assign(weighted ? total : 0, 1.0f);
    cursor_.assign(b.offsets.begin(), b.offsets.end() - 1);
    for (int i = 0; i < n; ++i) {
      const CtrSample& s = pending_[static_cast<std::size_t>(i)];
      b.labels[static_cast<std::size_t>(i)] = s.label;
      for (const CtrFeature& f : s.feats) {
        const auto pos = static_cast<std::size_t>(cursor_[static_cast<std::size_t>(f.table) * n + i]++);
        b.indices[pos] = category_row(f.table, f.key, rows_[static_cast<std::size_t>(f.table)]);
        if (weighted) b.weights[pos] = f.weight;
      }
    }
    return true;
  }
  std::uint64_t size_hint() const override { return expected_; }
  const MalformedReport& malformed() const { return reader_->malformed(); }

 private:
  std::string path_;
  CtrSpec spec_;
  std::vector<std::int64_t> rows_;
  std::vector<std::string> names_;
  bool strict_;
  std::uint64_t first_, last_, expected_;
  std::unique_ptr<CtrReader> reader_;
  std::vector<CtrSample> pending_;
  std::vector<std::int64_t> cursor_;
};

}  // namespace dlrm
