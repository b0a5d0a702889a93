// SPDX-License-Identifier: Apache-2.0
// Data for torch_dlrm.py: the C++ trainer's own sources (examples/train_dlrm/synthetic.hpp,
// data.hpp), so the PyTorch example trains on exactly the same samples as train_dlrm —
// the synthetic Criteo-Kaggle-shaped stream, or Criteo text files split and hashed the
// same way. JIT-compiled by torch_dlrm.py with torch.utils.cpp_extension.load.
#include <torch/extension.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "data.hpp"
#include "synthetic.hpp"

namespace py = pybind11;
using namespace dlrm;

struct Data {
  std::string description;
  std::vector<std::int64_t> table_rows;
  std::uint64_t train_size = 0, test_size = 0;
  std::shared_ptr<SyntheticWorld> world;
  std::function<std::unique_ptr<BatchSource>()> make_train, make_test;
};

// The same split, scan and table sizes as train_dlrm's make_data (main.cpp).
std::shared_ptr<Data> file_data(const std::string& path, double test_fraction, std::int64_t max_rows,
                                bool strict) {
  auto d = std::make_shared<Data>();
  if (!(test_fraction > 0 && test_fraction < 1))
    throw std::invalid_argument("test_fraction must be in (0, 1)");
  // The split is of the data lines (blank lines are not samples), as train_dlrm's.
  const DataLines dl = count_data_lines(path, 1);
  const std::uint64_t n = dl.data;
  const auto n_test = static_cast<std::uint64_t>(std::llround(test_fraction * static_cast<double>(n)));
  if (n_test == 0 || n_test >= n) throw std::invalid_argument("'" + path + "' has too few lines to split");
  const std::uint64_t test_first = nth_data_line(path, 1, n - n_test + 1), train_last = test_first - 1,
                      test_last = dl.lines;
  const ScanResult tr = scan_criteo(path, static_cast<std::uint64_t>(max_rows), strict, 1, train_last);
  const ScanResult te = scan_criteo(path, 0, strict, test_first, test_last);
  if (tr.valid == 0 || te.valid == 0) throw std::invalid_argument("no valid lines in '" + path + "'");
  d->table_rows = table_rows_from_scan(tr, max_rows);
  d->train_size = tr.valid;
  d->test_size = te.valid;
  d->description = path + ": lines 1-" + std::to_string(train_last) + " train (" + std::to_string(tr.valid) +
                   " valid), " + std::to_string(test_first) + "-" + std::to_string(test_last) + " test (" +
                   std::to_string(te.valid) + " valid)";
  const auto rows = d->table_rows;
  const auto ntr = tr.valid, nte = te.valid;
  d->make_train = [=] { return std::make_unique<FileBatchSource>(path, rows, strict, 1, train_last, ntr); };
  d->make_test = [=] {
    return std::make_unique<FileBatchSource>(path, rows, strict, test_first, test_last, nte);
  };
  return d;
}

std::shared_ptr<Data> synthetic_data(double scale, double zipf, double effect_scale, std::uint64_t data_seed,
                                     std::uint64_t train_samples, std::uint64_t test_samples) {
  auto d = std::make_shared<Data>();
  SyntheticConfig sc;
  sc.scale = scale;
  sc.zipf_exponent = zipf;
  sc.effect_scale = effect_scale;
  sc.seed = data_seed;
  d->world = std::make_shared<SyntheticWorld>(sc);
  d->table_rows = d->world->table_rows();
  d->train_size = train_samples;
  d->test_size = test_samples;
  d->description = "synthetic Criteo-Kaggle-like (scale " + std::to_string(scale) + ", Zipf " +
                   std::to_string(zipf) + ", data seed " + std::to_string(data_seed) +
                   "): " + std::to_string(train_samples) + " train / " + std::to_string(test_samples) +
                   " test samples";
  std::shared_ptr<const SyntheticWorld> w = d->world;
  d->make_train = [w, train_samples] { return std::make_unique<SyntheticSource>(*w, 0, train_samples); };
  d->make_test = [w, train_samples, test_samples] {
    return std::make_unique<SyntheticSource>(*w, train_samples, test_samples);
  };
  return d;
}

// Batches as tensors: dense (B, 13) float32, indices (26*B,) int64 table-major (one id per
// bag), offsets (26*B + 1,) int64, labels (B,) float32, p_true (B,) float32 or empty.
class Source {
 public:
  explicit Source(std::unique_ptr<BatchSource> s) : s_(std::move(s)) {}
  py::object next(int max_batch) {
    bool more;
    {
      py::gil_scoped_release nogil;
      more = s_->next(b_, max_batch);
    }
    if (!more) return py::none();
    const int B = b_.size;
    auto f32 = at::TensorOptions().dtype(at::kFloat);
    auto i64 = at::TensorOptions().dtype(at::kLong);
    // Eigen (13, B) column-major is (B, 13) row-major.
    at::Tensor dense = torch::from_blob(b_.dense.data(), {B, kNumDense}, f32).clone();
    at::Tensor idx =
        torch::from_blob(b_.indices.data(), {static_cast<int64_t>(b_.indices.size())}, i64).clone();
    at::Tensor off =
        torch::from_blob(b_.offsets.data(), {static_cast<int64_t>(b_.offsets.size())}, i64).clone();
    at::Tensor labels = torch::from_blob(b_.labels.data(), {B}, f32).clone();
    at::Tensor p = torch::from_blob(b_.p_true.data(), {static_cast<int64_t>(b_.p_true.size())}, f32).clone();
    return py::make_tuple(dense, idx, off, labels, p);
  }
  void reset() { s_->reset(); }

 private:
  std::unique_ptr<BatchSource> s_;
  Batch b_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::class_<Data, std::shared_ptr<Data>>(m, "Data")
      .def_readonly("description", &Data::description)
      .def_readonly("table_rows", &Data::table_rows)
      .def_readonly("train_size", &Data::train_size)
      .def_readonly("test_size", &Data::test_size)
      .def("train", [](const Data& d) { return std::make_unique<Source>(d.make_train()); })
      .def("test", [](const Data& d) { return std::make_unique<Source>(d.make_test()); });
  py::class_<Source>(m, "Source").def("next", &Source::next).def("reset", &Source::reset);
  m.def("synthetic", &synthetic_data);
  m.def("criteo_file", &file_data);
}
