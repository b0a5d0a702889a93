// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C.TieredRows: mpe::TieredRows (include/mpe/embedding/tiered_rows.hpp) over
// int64 CPU tensors, behind the Python class mpe_torch.TieredRows (mpe_torch/_tiered.py), which
// moves tensors between devices. Host code: the map runs on the calling thread.
#include "tiered_binding.hpp"

#include <torch/extension.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpe/embedding/tiered_rows.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace mpe_torch {
namespace {

/// ids as a span: a (n) contiguous int64 CPU tensor (else the errors of check_tensor_arg).
std::span<const std::int64_t> ids_of(const char* fn, const at::Tensor& ids) {
  check_tensor_arg("TieredRows", fn, "ids", ids, at::kLong, 1);
  return cspan<std::int64_t>(ids);
}

/// The constructor's arguments as a TieredRowsConfig: a value beyond the u32 fields is named
/// here (mpe checks the ranges it can see).
mpe::TieredRowsConfig make_config(int64_t ids, int64_t private_rows, int64_t shared_rows, int64_t promote_at,
                                  int64_t demote_below, int64_t decay_every, int64_t sketch_width,
                                  uint64_t seed) {
  for (const auto& [name, v] :
       {std::pair{"promote_at", promote_at}, std::pair{"demote_below", demote_below}}) {
    if (v < 0 || v > 0xffffffffLL)
      throw std::invalid_argument(std::string("mpe::TieredRows: TieredRowsConfig::") + name + " = " +
                                  std::to_string(v) + " must be in [0, 2^32)");
  }
  mpe::TieredRowsConfig c;
  c.ids = ids;
  c.private_rows = private_rows;
  c.shared_rows = shared_rows;
  c.promote_at = static_cast<std::uint32_t>(promote_at);
  c.demote_below = static_cast<std::uint32_t>(demote_below);
  c.decay_every = decay_every;
  c.sketch_width = sketch_width;
  c.seed = seed;
  return c;
}

py::dict config_dict(const mpe::TieredRowsConfig& c) {
  py::dict d;
  d["ids"] = c.ids;
  d["private_rows"] = c.private_rows;
  d["shared_rows"] = c.shared_rows;
  d["promote_at"] = c.promote_at;
  d["demote_below"] = c.demote_below;
  d["decay_every"] = c.decay_every;
  d["sketch_width"] = c.sketch_width;
  d["seed"] = c.seed;
  return d;
}

class Tiered {
 public:
  Tiered(int64_t ids, int64_t private_rows, int64_t shared_rows, int64_t promote_at, int64_t demote_below,
         int64_t decay_every, int64_t sketch_width, uint64_t seed)
      : t_(make_config(ids, private_rows, shared_rows, promote_at, demote_below, decay_every, sketch_width,
                       seed)) {}
  /// mpe::TieredRows::resolve (the resolved config as config() returns it) and
  /// planned_memory_bytes, for the constructor's arguments, allocating nothing.
  static py::dict resolve(int64_t ids, int64_t private_rows, int64_t shared_rows, int64_t promote_at,
                          int64_t demote_below, int64_t decay_every, int64_t sketch_width, uint64_t seed) {
    return config_dict(mpe::TieredRows::resolve(make_config(ids, private_rows, shared_rows, promote_at,
                                                            demote_below, decay_every, sketch_width, seed)));
  }
  static int64_t planned_memory_bytes(int64_t ids, int64_t private_rows, int64_t shared_rows,
                                      int64_t promote_at, int64_t demote_below, int64_t decay_every,
                                      int64_t sketch_width, uint64_t seed) {
    return static_cast<int64_t>(mpe::TieredRows::planned_memory_bytes(make_config(
        ids, private_rows, shared_rows, promote_at, demote_below, decay_every, sketch_width, seed)));
  }

  at::Tensor map(const at::Tensor& ids) {
    const auto in = ids_of("map", ids);
    at::Tensor rows = at::empty({ids.numel()}, at::TensorOptions().dtype(at::kLong));
    py::gil_scoped_release nogil;
    t_.map(in, mspan<std::int64_t>(rows));
    return rows;
  }
  at::Tensor lookup(const at::Tensor& ids) const {
    const auto in = ids_of("lookup", ids);
    at::Tensor rows = at::empty({ids.numel()}, at::TensorOptions().dtype(at::kLong));
    py::gil_scoped_release nogil;
    t_.lookup(in, mspan<std::int64_t>(rows));
    return rows;
  }
  int64_t row_of(int64_t id) const { return t_.row_of(id); }
  /// (k, 3) int64: id, from_row, to_row of each promotion of the last map().
  at::Tensor last_moves() const {
    const auto m = t_.last_moves();
    at::Tensor out = at::empty({static_cast<int64_t>(m.size()), 3}, at::TensorOptions().dtype(at::kLong));
    auto* p = out.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < m.size(); ++i) {
      p[3 * i] = m[i].id;
      p[3 * i + 1] = m[i].from_row;
      p[3 * i + 2] = m[i].to_row;
    }
    return out;
  }
  py::dict config() const { return config_dict(t_.config()); }
  py::dict stats() const {
    const mpe::TieredRowsStats& s = t_.stats();
    py::dict d;
    d["lookups"] = s.lookups;
    d["private_lookups"] = s.private_lookups;
    d["shared_lookups"] = s.shared_lookups;
    d["promotions"] = s.promotions;
    d["demotions"] = s.demotions;
    d["decays"] = s.decays;
    d["refused_promotions"] = s.refused_promotions;
    return d;
  }
  void reset_stats() { t_.reset_stats(); }
  int64_t physical_rows() const { return t_.physical_rows(); }
  int64_t hot_ids() const { return t_.hot_ids(); }
  int64_t memory_bytes() const { return static_cast<int64_t>(t_.memory_bytes()); }
  at::Tensor save_bytes() const { return bytes_tensor(t_.save_bytes()); }
  void load_bytes(const at::Tensor& bytes) {
    check_tensor_arg("TieredRows", "load_bytes", "bytes", bytes, at::kByte, 1);
    t_.load_bytes(cspan<std::uint8_t>(bytes));
  }

 private:
  mpe::TieredRows t_;
};

}  // namespace

void bind_tiered_rows(py::module_& m) {
  py::class_<Tiered>(m, "TieredRows")
      .def(py::init<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint64_t>(),
           py::arg("ids"), py::arg("private_rows"), py::arg("shared_rows"), py::arg("promote_at"),
           py::arg("demote_below"), py::arg("decay_every"), py::arg("sketch_width"), py::arg("seed"))
      .def_static("resolve", &Tiered::resolve, py::arg("ids"), py::arg("private_rows"),
                  py::arg("shared_rows"), py::arg("promote_at"), py::arg("demote_below"),
                  py::arg("decay_every"), py::arg("sketch_width"), py::arg("seed"))
      .def_static("planned_memory_bytes", &Tiered::planned_memory_bytes, py::arg("ids"),
                  py::arg("private_rows"), py::arg("shared_rows"), py::arg("promote_at"),
                  py::arg("demote_below"), py::arg("decay_every"), py::arg("sketch_width"), py::arg("seed"))
      .def("map", &Tiered::map, py::arg("ids"))
      .def("lookup", &Tiered::lookup, py::arg("ids"))
      .def("row_of", &Tiered::row_of, py::arg("id"))
      .def("last_moves", &Tiered::last_moves)
      .def("config", &Tiered::config)
      .def("stats", &Tiered::stats)
      .def("reset_stats", &Tiered::reset_stats)
      .def_property_readonly("physical_rows", &Tiered::physical_rows)
      .def_property_readonly("hot_ids", &Tiered::hot_ids)
      .def("memory_bytes", &Tiered::memory_bytes)
      .def("save_bytes", &Tiered::save_bytes)
      .def("load_bytes", &Tiered::load_bytes, py::arg("bytes"));
}

}  // namespace mpe_torch
