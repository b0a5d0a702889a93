// The DataSetup of file input (--data or --train/--test) in any --format: Criteo TSV
// (data.hpp) or a CTR format of formats.hpp (ctr_source.hpp). One streaming pass over the
// training part sizes the tables, one over the test part counts its samples; malformed
// lines are reported on stderr (or, under --strict, thrown).
#pragma once

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ctr_source.hpp"
#include "data.hpp"
#include "divergence.hpp"
#include "formats.hpp"
#include "run.hpp"
#include "text.hpp"

namespace dlrm {

struct FileDataOptions {
  Format format = Format::Criteo;
  std::string data, train, test;  // --data, or --train and --test
  double test_fraction = 0.1;
  bool strict = false;
  std::int64_t max_rows = 1000000;
  std::vector<std::uint64_t> field_bounds;  // libsvm: --field-bounds
};

inline void print_malformed(const std::string& what, const MalformedReport& m) {
  if (m.count == 0) return;
  std::cerr << "warning: " << m.count << " malformed line(s) skipped in " << what << ":\n";
  for (const auto& s : m.first) std::cerr << "  " << s << "\n";
  if (m.count > m.first.size()) std::cerr << "  ...\n";
}

// Throws DataError (main: exit code 2) for a file that is missing or unreadable, that has
// too few data lines to split off the test fraction, or that holds no valid training or test
// line (the training part is checked before the test part is read); MalformedLine under
// --strict; std::invalid_argument for a bad option value.
inline DataSetup make_file_data(const FileDataOptions& o) {
  DataSetup d;
  std::string train_path, test_path;
  std::uint64_t train_first = 1, train_last = 0, test_first = 1, test_last = 0;
  if (!o.data.empty()) {
    if (!(o.test_fraction > 0 && o.test_fraction < 1))
      throw std::invalid_argument("--test-fraction must be in (0, 1)");
    // An Avazu header line is not a sample, nor is a blank line: the split is of the data
    // lines (the lines after the header that are not blank).
    const std::uint64_t head = o.format == Format::Avazu && avazu_has_header(o.data) ? 1 : 0;
    const DataLines dl = count_data_lines(o.data, 1 + head);
    const std::uint64_t lines = dl.lines, n = dl.data;
    const auto n_test = static_cast<std::uint64_t>(std::llround(o.test_fraction * static_cast<double>(n)));
    if (n_test == 0 || n_test >= n)
      throw DataError("'" + o.data + "' has " + std::to_string(n) +
                      " data lines: too few to split off a test fraction of " +
                      std::to_string(o.test_fraction));
    const std::uint64_t test_start = nth_data_line(o.data, 1 + head, n - n_test + 1);
    train_path = test_path = o.data;
    train_first = 1 + head;
    train_last = test_start - 1;  // deterministic split: the last fraction of data lines is the test set
    test_first = test_start;
    test_last = lines;
    d.description = o.data + ": lines " + std::to_string(train_first) + "-" + std::to_string(train_last) +
                    " train, " + std::to_string(test_first) + "-" + std::to_string(lines) + " test";
  } else {
    if (o.test.empty()) throw std::invalid_argument("--train needs --test");
    train_path = o.train;
    test_path = o.test;
    d.description = "train " + o.train + ", test " + o.test;
  }
  d.description = std::string(format_name(o.format)) + " " + d.description;
  const bool strict = o.strict;
  std::uint64_t ntr = 0, nte = 0, ptr = 0, pte = 0;
  if (o.format == Format::Criteo) {
    const ScanResult tr =
        scan_criteo(train_path, static_cast<std::uint64_t>(o.max_rows), strict, train_first, train_last);
    print_malformed("training data", tr.malformed);
    if (tr.valid == 0) throw DataError("no valid training lines in '" + train_path + "'");
    const ScanResult te = scan_criteo(test_path, 0, strict, test_first, test_last);
    print_malformed("test data", te.malformed);
    d.table_rows = table_rows_from_scan(tr, o.max_rows);
    d.num_dense = kNumDense;
    ntr = tr.valid, nte = te.valid, ptr = tr.positives, pte = te.positives;
    const auto rows = d.table_rows;
    d.make_train = [=] {
      return std::make_unique<FileBatchSource>(train_path, rows, strict, train_first, train_last, ntr);
    };
    d.make_test = [=] {
      return std::make_unique<FileBatchSource>(test_path, rows, strict, test_first, test_last, nte);
    };
  } else {
    CtrSpec spec;
    spec.format = o.format;
    spec.fields.bounds = o.field_bounds;
    spec.fields.check();
    const CtrScan tr =
        scan_ctr(train_path, spec, static_cast<std::uint64_t>(o.max_rows), strict, train_first, train_last);
    print_malformed("training data", tr.malformed);
    if (tr.valid == 0) throw DataError("no valid training lines in '" + train_path + "'");
    if (o.format == Format::Libfm)
      spec.libfm_fields = tr.tables;  // the test part's fields must be among them
    const CtrScan te = scan_ctr(test_path, spec, 0, strict, test_first, test_last);
    print_malformed("test data", te.malformed);
    if (o.format == Format::Avazu && te.table_names != tr.table_names)
      throw DataError("'" + test_path + "': its columns differ from the training data's");
    d.table_rows = table_rows_from_ctr_scan(tr, o.max_rows);
    d.num_dense = 0;
    ntr = tr.valid, nte = te.valid, ptr = tr.positives, pte = te.positives;
    const auto rows = d.table_rows;
    const auto names = tr.table_names;
    d.make_train = [=] {
      return std::make_unique<CtrFileSource>(train_path, spec, rows, strict, train_first, train_last, ntr,
                                             names);
    };
    d.make_test = [=] {
      return std::make_unique<CtrFileSource>(test_path, spec, rows, strict, test_first, test_last, nte,
                                             names);
    };
  }
  if (nte == 0) throw DataError("no valid test lines in '" + test_path + "'");
  d.train_size = ntr;
  d.test_size = nte;
  d.label_mean_logloss = constant_prediction_log_loss(static_cast<double>(ptr) / static_cast<double>(ntr),
                                                      static_cast<double>(pte) / static_cast<double>(nte));
  d.description += " (" + std::to_string(ntr) + " train samples, " + std::to_string(ptr) + " positive; " +
                   std::to_string(nte) + " test samples, " + std::to_string(pte) + " positive; " +
                   std::to_string(d.num_dense) + " dense features)";
  return d;
}

}  // namespace dlrm
