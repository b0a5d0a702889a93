// Criteo text-format reader, the line stream every file reader uses, and the batch type fed
// to the model (the other CTR formats: formats.hpp, ctr_source.hpp).
//
// Format: one sample a line, 40 tab-separated fields: label (0/1), 13 integer
// features (may be negative or empty), 26 categorical features as 8-hex-digit
// hashes (may be empty). A trailing '\r' is ignored; a blank line (empty or only spaces,
// tabs, '\r') is skipped, and a UTF-8 byte order mark before the first line is dropped.
//   dense  -> log(1 + max(x, 0)), empty -> 0
//   hash   -> criteo_row() in hash.hpp (row 0 = missing)
// A malformed line (wrong field count, label not 0/1, non-integer dense value,
// categorical value that is not exactly 8 hex digits) is counted, the first few
// are kept with their line numbers, and the line is skipped; in strict mode the
// reader throws MalformedLine instead.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "hash.hpp"
#include "text.hpp"

namespace dlrm {

inline constexpr int kNumDense = 13;
inline constexpr int kNumCat = 26;
inline constexpr int kNumFields = 1 + kNumDense + kNumCat;

// Missing/unreadable input file (main exits with code 2).
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Malformed line under --strict (main exits with code 3).
struct MalformedLine : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Sample {
  float label = 0;
  std::array<float, kNumDense> dense{};
  std::array<std::uint32_t, kNumCat> cat{};
  std::array<bool, kNumCat> cat_present{};
};

inline float dense_transform(std::int64_t x) noexcept {
  return static_cast<float>(std::log1p(static_cast<double>(std::max<std::int64_t>(x, 0))));
}

inline bool is_hex(char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Parses one line. Returns an empty string on success, else the reason.
inline std::string parse_criteo_line(std::string_view line, Sample& s) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const auto tabs = std::count(line.begin(), line.end(), '\t');
  if (tabs + 1 != kNumFields) return "expected 40 tab-separated fields, got " + std::to_string(tabs + 1);
  std::array<std::string_view, kNumFields> f;
  std::size_t start = 0;
  for (int i = 0; i < kNumFields; ++i) {
    const std::size_t tab = line.find('\t', start);
    f[i] = line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start);
    start = tab + 1;
  }
  if (f[0] == "0")
    s.label = 0;
  else if (f[0] == "1")
    s.label = 1;
  else
    return "label must be 0 or 1, got " + quote_token(f[0]);
  for (int j = 0; j < kNumDense; ++j) {
    const std::string_view v = f[1 + j];
    if (v.empty()) {
      s.dense[j] = 0;
      continue;
    }
    std::int64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc{} || p != v.data() + v.size())
      return "dense feature " + std::to_string(j + 1) + " is not an integer: " + quote_token(v);
    s.dense[j] = dense_transform(x);
  }
  for (int k = 0; k < kNumCat; ++k) {
    const std::string_view v = f[1 + kNumDense + k];
    if (v.empty()) {
      s.cat_present[k] = false;
      s.cat[k] = 0;
      continue;
    }
    if (v.size() != 8 || !std::all_of(v.begin(), v.end(), is_hex))
      return "categorical feature " + std::to_string(k + 1) + " is not 8 hex digits: " + quote_token(v);
    std::uint32_t h = 0;
    std::from_chars(v.data(), v.data() + v.size(), h, 16);  // cannot fail: 8 hex digits fit
    s.cat[k] = h;
    s.cat_present[k] = true;
  }
  return {};
}

struct MalformedReport {
  static constexpr std::size_t kKeep = 5;
  std::uint64_t count = 0;
  std::vector<std::string> first;  // "line N: reason", the first kKeep
  void add(std::uint64_t line_no, const std::string& why) {
    ++count;
    if (first.size() < kKeep) first.push_back("line " + std::to_string(line_no) + ": " + why);
  }
};

inline void check_readable(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw DataError("cannot open '" + path + "': no such file");
  if (std::filesystem::is_directory(st)) throw DataError("cannot open '" + path + "': is a directory");
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw DataError("cannot open '" + path + "': " + std::strerror(errno));
}

// A text file read line by line through a 1 MiB buffer; never holds more than one line.
// Lines are numbered from 1; a UTF-8 byte order mark before the first line is dropped.
class LineStream {
 public:
  explicit LineStream(std::string path) : path_(std::move(path)), buf_(std::make_unique<char[]>(kBuf)) {
    check_readable(path_);
    in_.rdbuf()->pubsetbuf(buf_.get(), kBuf);
    in_.open(path_, std::ios::binary);
    if (!in_) throw DataError("cannot open '" + path_ + "': " + std::strerror(errno));
  }
  // The next line (without its '\n'); false at the end of the file.
  bool next(std::string_view& line) {
    if (!std::getline(in_, line_)) {
      if (in_.bad()) throw DataError("read error in '" + path_ + "'");
      return false;
    }
    ++line_no_;
    line = line_;
    if (line_no_ == 1 && line.starts_with(kUtf8Bom)) line.remove_prefix(kUtf8Bom.size());
    return true;
  }
  std::uint64_t line_number() const noexcept { return line_no_; }
  const std::string& path() const noexcept { return path_; }

 private:
  static constexpr std::size_t kBuf = 1 << 20;
  std::string path_;
  std::unique_ptr<char[]> buf_;
  std::ifstream in_;
  std::string line_;
  std::uint64_t line_no_ = 0;
};

// Streams a Criteo file (LineStream). [first_line, last_line] limits the lines it returns
// (last_line 0 = to the end).
class CriteoReader {
 public:
  CriteoReader(std::string path, bool strict, std::uint64_t first_line = 1, std::uint64_t last_line = 0)
      : in_(std::move(path)), strict_(strict), first_(first_line), last_(last_line) {}

  // Next valid sample in range; malformed lines are counted and skipped, blank ones skipped.
  bool next(Sample& s) {
    std::string_view line;
    while (true) {
      if (last_ != 0 && in_.line_number() >= last_) return false;
      if (!in_.next(line)) return false;
      const std::uint64_t n = in_.line_number();
      if (n < first_ || is_blank_line(line)) continue;
      const std::string why = parse_criteo_line(line, s);
      if (why.empty()) return true;
      if (strict_) throw MalformedLine(in_.path() + ": line " + std::to_string(n) + ": " + why);
      bad_.add(n, why);
    }
  }

  std::uint64_t line_number() const noexcept { return in_.line_number(); }
  const MalformedReport& malformed() const noexcept { return bad_; }
  const std::string& path() const noexcept { return in_.path(); }

 private:
  LineStream in_;
  bool strict_;
  std::uint64_t first_, last_;
  MalformedReport bad_;
};

// Number of lines (a last line without '\n' counts).
inline std::uint64_t count_lines(const std::string& path) {
  check_readable(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  std::uint64_t n = 0;
  char last = '\n';
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = in.gcount();
    if (got <= 0) break;
    n += static_cast<std::uint64_t>(std::count(buf.data(), buf.data() + got, '\n'));
    last = buf[static_cast<std::size_t>(got) - 1];
  }
  if (in.bad()) throw DataError("read error in '" + path + "'");
  return n + (last != '\n' ? 1 : 0);
}

// The data lines of a file: the lines from `first` on that are not blank (train_dlrm's
// --data split and the PyTorch example's count these).
struct DataLines {
  std::uint64_t lines = 0;  // every line of the file
  std::uint64_t data = 0;   // lines from `first` on that are not blank
};
inline DataLines count_data_lines(const std::string& path, std::uint64_t first) {
  LineStream in(path);
  DataLines out;
  std::string_view line;
  while (in.next(line))
    if (in.line_number() >= first && !is_blank_line(line)) ++out.data;
  out.lines = in.line_number();
  return out;
}
// The line number of the k-th (from 1) line from `first` on that is not blank (0: none).
inline std::uint64_t nth_data_line(const std::string& path, std::uint64_t first, std::uint64_t k) {
  LineStream in(path);
  std::string_view line;
  while (in.next(line))
    if (in.line_number() >= first && !is_blank_line(line) && --k == 0) return in.line_number();
  return 0;
}

struct ScanResult {
  std::uint64_t lines = 0;                        // physical lines in range
  std::uint64_t valid = 0;                        // parsed samples
  std::uint64_t positives = 0;                    // label 1
  std::array<std::uint64_t, kNumCat> distinct{};  // distinct present hashes, capped at max_distinct
  MalformedReport malformed;
};

// One streaming pass: counts and per-feature cardinalities (each feature's set
// stops growing at max_distinct, so memory is bounded by 26 * max_distinct).
inline ScanResult scan_criteo(const std::string& path, std::uint64_t max_distinct, bool strict,
                              std::uint64_t first_line = 1, std::uint64_t last_line = 0) {
  CriteoReader r(path, strict, first_line, last_line);
  ScanResult out;
  std::array<std::unordered_set<std::uint32_t>, kNumCat> seen;
  Sample s;
  while (r.next(s)) {
    ++out.valid;
    out.positives += s.label > 0.5f ? 1 : 0;
    for (int k = 0; k < kNumCat; ++k)
      if (s.cat_present[k] && seen[k].size() < max_distinct) seen[k].insert(s.cat[k]);
  }
  for (int k = 0; k < kNumCat; ++k) out.distinct[k] = seen[k].size();
  out.lines = r.line_number() >= first_line ? r.line_number() - first_line + 1 : 0;
  out.malformed = r.malformed();
  return out;
}

// Table sizes: min(cardinality + 1 missing row, max_rows), at least 2.
inline std::vector<std::int64_t> table_rows_from_scan(const ScanResult& s, std::int64_t max_rows) {
  std::vector<std::int64_t> rows(kNumCat);
  for (int k = 0; k < kNumCat; ++k)
    rows[k] = std::max<std::int64_t>(
        2, std::min<std::int64_t>(static_cast<std::int64_t>(s.distinct[k]) + 1, max_rows));
  return rows;
}

// One mini-batch. Dense features column-major (num_dense, B); categorical rows
// table-major: bag (t, b) is indices[offsets[t*B + b] .. offsets[t*B + b + 1]). resize()
// makes one index per bag (offsets = 0, 1, ..., T*B; Criteo, synthetic); a multi-hot
// source (ctr_source.hpp) writes its own offsets and, where its features carry values,
// weights (one per index, sum pooling; empty = all 1).
struct Batch {
  int size = 0;
  int tables = 0;
  Eigen::MatrixXf dense;
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> offsets;
  std::vector<float> weights;  // per index (empty: every weight 1)
  std::vector<float> labels;
  std::vector<float> p_true;  // synthetic only (else empty)

  void resize(int B, int T, bool with_p, int num_dense = kNumDense) {
    size = B;
    tables = T;
    dense.resize(num_dense, B);
    indices.resize(static_cast<std::size_t>(T) * B);
    if (!one_per_bag_ || offsets.size() != indices.size() + 1) {
      offsets.resize(indices.size() + 1);
      for (std::size_t j = 0; j < offsets.size(); ++j) offsets[j] = static_cast<std::int64_t>(j);
      one_per_bag_ = true;
    }
    weights.clear();
    labels.resize(B);
    p_true.resize(with_p ? B : 0);
  }
  // For a multi-hot source: sizes set, offsets and indices left for the caller to write.
  void resize_bags(int B, int T, int num_dense) {
    size = B;
    tables = T;
    dense.resize(num_dense, B);
    offsets.resize(static_cast<std::size_t>(T) * B + 1);
    one_per_bag_ = false;
    labels.resize(B);
    p_true.clear();
  }

 private:
  bool one_per_bag_ = false;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void reset() = 0;
  // Fills up to max_batch samples; false when exhausted.
  virtual bool next(Batch& b, int max_batch) = 0;
  virtual std::uint64_t size_hint() const = 0;
};

class FileBatchSource final : public BatchSource {
 public:
  FileBatchSource(std::string path, std::vector<std::int64_t> table_rows, bool strict,
                  std::uint64_t first_line, std::uint64_t last_line, std::uint64_t expected)
      : path_(std::move(path)),
        rows_(std::move(table_rows)),
        strict_(strict),
        first_(first_line),
        last_(last_line),
        expected_(expected) {
    reset();
  }
  void reset() override { reader_ = std::make_unique<CriteoReader>(path_, strict_, first_, last_); }
  bool next(Batch& b, int max_batch) override {
    const int T = static_cast<int>(rows_.size());
    if (pending_.size() < static_cast<std::size_t>(max_batch)) pending_.resize(max_batch);
    int n = 0;
    while (n < max_batch && reader_->next(pending_[n])) ++n;
    if (n == 0) return false;
    b.resize(n, T, false);
    for (int i = 0; i < n; ++i) {
      const Sample& s = pending_[i];
      b.labels[i] = s.label;
      for (int j = 0; j < kNumDense; ++j) b.dense(j, i) = s.dense[j];
      for (int t = 0; t < T; ++t)
        b.indices[static_cast<std::size_t>(t) * n + i] = criteo_row(s.cat_present[t], s.cat[t], t, rows_[t]);
    }
    return true;
  }
  std::uint64_t size_hint() const override { return expected_; }
  const MalformedReport& malformed() const { return reader_->malformed(); }

 private:
  std::string path_;
  std::vector<std::int64_t> rows_;
  bool strict_;
  std::uint64_t first_, last_, expected_;
  std::unique_ptr<CriteoReader> reader_;
  std::vector<Sample> pending_;
};

}  // namespace dlrm
