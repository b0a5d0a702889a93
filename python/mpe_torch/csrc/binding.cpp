// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C: the tensor-facing core of mpe_torch.TableBatchedEmbeddingBags.
//
// One `Tbe` holds T tables given as (rows, D) specs. The mpe core keeps one D per
// CachedEmbedding, so the tables are grouped by D (groups in order of first appearance,
// tables inside a group in spec order), one CachedEmbedding per group. forward() splits the
// table-major CSR input into one CSR per group, runs every group, and scatters each group's
// (B, k*D_g) output into the columns of its tables in the (B, sum D_t) result; backward()
// gathers the gradient's columns the other way and runs every group's fused optimizer step.
// With one group (every table of one D) nothing is copied: the tensors go straight to mpe.
//
// Tensor arguments are checked, never converted: dtype (TypeError), device, dimensions,
// shape and contiguity (ValueError). mpe's exceptions pass through pybind11's translation:
// std::invalid_argument -> ValueError, std::logic_error -> RuntimeError,
// mpe::checkpoint_error -> mpe_torch.CheckpointError (a RuntimeError).
#include <torch/extension.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "group.hpp"

namespace py = pybind11;

namespace mpe_torch {
namespace {

/// The dtype as Python spells it (torch.int64, not c10's "Long").
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    default: return std::string("torch.") + c10::toString(t);
  }
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "(";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + (t.dim() == 1 ? ",)" : ")");
}

/// Refuses (never converts) a tensor that is not a contiguous CPU tensor of `dtype` with
/// `dims` dimensions.
void check_tensor(const char* fn, const char* name, const at::Tensor& t, at::ScalarType dtype, int64_t dims) {
  const std::string where = std::string("mpe_torch.TableBatchedEmbeddingBags.") + fn + ": " + name;
  if (!t.defined()) throw std::invalid_argument(where + " is undefined");
  if (t.scalar_type() != dtype)
    throw py::type_error(where + " must have dtype " + dtype_name(dtype) + ", got " + dtype_name(t.scalar_type()) +
                         " (convert it yourself, e.g. " + name + ".to(" + dtype_name(dtype) + "))");
  if (!t.device().is_cpu())
    throw std::invalid_argument(where + " must be on the CPU (mpe_torch runs the host backend), got device " +
                                t.device().str());
  if (t.layout() != at::kStrided) throw std::invalid_argument(where + " must be a dense (strided) tensor");
  if (t.dim() != dims)
    throw std::invalid_argument(where + " must have " + std::to_string(dims) + " dimension" + (dims == 1 ? "" : "s") +
                                ", got shape " + shape_str(t));
  if (!t.is_contiguous())
    throw std::invalid_argument(where + " must be contiguous (call .contiguous()), got strides that are not");
  if (t.requires_grad() && std::string(name) == "per_sample_weights")
    throw std::invalid_argument(where + " must not require grad (mpe_torch does not differentiate them)");
}

template <class T>
std::span<const T> cspan(const at::Tensor& t) {
  return {t.data_ptr<T>(), static_cast<std::size_t>(t.numel())};
}
template <class T>
std::span<T> mspan(at::Tensor& t) {
  return {t.data_ptr<T>(), static_cast<std::size_t>(t.numel())};
}

mpe::Pooling parse_pooling(const std::string& p) {
  if (p == "sum") return mpe::Pooling::Sum;
  if (p == "mean") return mpe::Pooling::Mean;
  throw std::invalid_argument("mpe_torch: pooling_mode = '" + p + "' is not one of 'sum', 'mean'");
}

OptKind parse_optimizer(const std::string& o) {
  if (o == "sgd") return OptKind::Sgd;
  if (o == "rowwise_adagrad") return OptKind::RowwiseAdagrad;
  if (o == "adagrad") return OptKind::Adagrad;
  if (o == "adam") return OptKind::Adam;
  throw std::invalid_argument("mpe_torch: optimizer = '" + o +
                              "' is not one of 'sgd', 'rowwise_adagrad', 'adagrad', 'adam'");
}

LayoutSpec parse_layout(const std::string& layout, int64_t alignment, bool scale_bias_last) {
  LayoutSpec l;
  if (layout == "fbgemm_fused") l.layout = Layout::Fused;
  else if (layout == "tbe_inference") l.layout = Layout::TbeInference;
  else
    throw std::invalid_argument("mpe_torch: layout = '" + layout + "' is not one of 'fbgemm_fused', 'tbe_inference'");
  if (alignment < 1 || alignment > (int64_t{1} << 20))
    throw std::invalid_argument("mpe_torch: alignment = " + std::to_string(alignment) + " must be in [1, 2^20]");
  l.alignment = static_cast<std::int32_t>(alignment);
  l.scale_bias_last = scale_bias_last;
  if (scale_bias_last && l.layout != Layout::TbeInference)
    throw std::invalid_argument("mpe_torch: scale_bias_last applies to layout 'tbe_inference' only");
  return l;
}

Target parse_target(const std::string& f) {
  if (f.empty() || f == "same") return Target::Same;
  if (f == "fp32") return Target::Fp32;
  if (f == "fp16") return Target::Fp16;
  if (f == "int8") return Target::Int8;
  if (f == "int4") return Target::Int4;
  throw std::invalid_argument("mpe_torch: format = '" + f + "' is not one of None, 'fp32', 'fp16', 'int8', 'int4'");
}

/// A temporary file path, removed by the destructor.
struct TempPath {
  std::filesystem::path path;
  TempPath() {
    static std::atomic<unsigned long long> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("mpe_torch." + std::to_string(::getpid()) + "." + std::to_string(counter++) + ".mpe");
  }
  ~TempPath() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

py::dict stats_dict(const mpe::CacheStats& s) {
  py::dict d;
  d["lookups"] = s.lookups;
  d["unique_rows"] = s.unique_rows;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["conflict_misses"] = s.conflict_misses;
  d["evictions"] = s.evictions;
  d["writebacks"] = s.writebacks;
  d["lfu_rejections"] = s.lfu_rejections;
  d["saturated_rows"] = s.saturated_rows;
  d["bytes_filled"] = s.bytes_filled;
  d["bytes_written_back"] = s.bytes_written_back;
  d["skipped_steps"] = s.skipped_steps;
  return d;
}

void add_stats(mpe::CacheStats& a, const mpe::CacheStats& b) {
  a.lookups += b.lookups;
  a.unique_rows += b.unique_rows;
  a.hits += b.hits;
  a.misses += b.misses;
  a.conflict_misses += b.conflict_misses;
  a.evictions += b.evictions;
  a.writebacks += b.writebacks;
  a.lfu_rejections += b.lfu_rejections;
  a.saturated_rows += b.saturated_rows;
  a.bytes_filled += b.bytes_filled;
  a.bytes_written_back += b.bytes_written_back;
  a.skipped_steps += b.skipped_steps;
}

py::dict memory_dict(const mpe::MemoryFootprint& m) {
  py::dict d;
  d["store_bytes"] = m.store_bytes;
  d["cache_bytes"] = m.cache_bytes;
  d["optimizer_bytes"] = m.optimizer_bytes;
  d["metadata_bytes"] = m.metadata_bytes;
  d["workspace_bytes"] = m.workspace_bytes;
  d["embedding_bytes"] = m.embedding_bytes();
  d["total_bytes"] = m.total();
  return d;
}

}  // namespace

class Tbe {
 public:
  Tbe(const std::vector<std::pair<int64_t, int64_t>>& specs, const std::string& storage, const std::string& cache,
      double cache_fraction, const std::string& rounding, const std::string& pooling, const std::string& optimizer,
      double learning_rate, double eps, double beta1, double beta2, uint64_t seed, int64_t ways)
      : pooling_(parse_pooling(pooling)) {
    if (specs.empty()) throw std::invalid_argument("mpe_torch: specs is empty; give at least one (rows, D) table");
    if (!(cache_fraction >= 0.0 && cache_fraction <= 1.0))
      throw std::invalid_argument("mpe_torch: cache_fraction = " + std::to_string(cache_fraction) +
                                  " must be in [0, 1]");
    if (cache != "none" && cache != "lru") {
      std::string list;
      for (const auto& c : built_combinations()) list += (list.empty() ? "" : ", ") + c;
      throw std::invalid_argument("mpe_torch: cache = '" + cache + "' is not built; built storage/cache/rounding: " +
                                  list);
    }
    if (cache == "none" && cache_fraction > 0)
      throw std::invalid_argument("mpe_torch: cache = 'none' with cache_fraction = " + std::to_string(cache_fraction) +
                                  " > 0; use cache='lru'");
    opt_.kind = parse_optimizer(optimizer);
    opt_.learning_rate = static_cast<float>(learning_rate);
    opt_.eps = static_cast<float>(eps);
    opt_.beta1 = static_cast<float>(beta1);
    opt_.beta2 = static_cast<float>(beta2);
    if (const std::string why = check_optimizer(opt_); !why.empty()) throw std::invalid_argument("mpe_torch: " + why);

    const std::size_t T = specs.size();
    table_group_.resize(T);
    table_local_.resize(T);
    table_col_.resize(T);
    rows_.resize(T);
    dims_.resize(T);
    for (std::size_t t = 0; t < T; ++t) {
      const auto [rows, dim] = specs[t];
      if (rows < 1 || dim < 1 || dim > (int64_t{1} << 20))
        throw std::invalid_argument("mpe_torch: specs[" + std::to_string(t) + "] = (" + std::to_string(rows) + ", " +
                                    std::to_string(dim) + "): rows must be >= 1 and D in [1, 2^20]");
      rows_[t] = rows;
      dims_[t] = dim;
      table_col_[t] = total_dim_;
      total_dim_ += dim;
      std::size_t g = 0;
      while (g < group_dim_.size() && group_dim_[g] != dim) ++g;
      if (g == group_dim_.size()) {
        group_dim_.push_back(dim);
        group_tables_.emplace_back();
      }
      table_group_[t] = static_cast<int64_t>(g);
      table_local_[t] = static_cast<int64_t>(group_tables_[g].size());
      group_tables_[g].push_back(static_cast<int64_t>(t));
    }
    const PolicyNames names{storage, cache, rounding};
    for (std::size_t g = 0; g < group_dim_.size(); ++g) {
      mpe::EmbeddingConfig cfg;
      int64_t total = 0;
      for (int64_t t : group_tables_[g]) {
        cfg.table_rows.push_back(rows_[static_cast<std::size_t>(t)]);
        total += rows_[static_cast<std::size_t>(t)];
      }
      cfg.dim = static_cast<std::int32_t>(group_dim_[g]);
      cfg.cache_rows = 0;
      if (cache == "lru" && cache_fraction > 0)
        cfg.cache_rows = std::max<int64_t>(ways, std::llround(cache_fraction * static_cast<double>(total)));
      // Group 0 takes the seed as given (a one-group module equals a CachedEmbedding with
      // config.seed = seed); other groups a distinct stream derived from it.
      cfg.seed = g == 0 ? seed : seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(g));
      groups_.push_back(make_group(names, cfg));
    }
    bufs_.resize(groups_.size());
  }

  int64_t num_tables() const { return static_cast<int64_t>(rows_.size()); }
  int64_t total_dim() const { return total_dim_; }

  /// Pooled lookup, (B, sum D_t) float32. `training`: CachedEmbedding::forward (populates
  /// the cache, remembered for backward); else forward_inference (changes nothing).
  at::Tensor forward(const at::Tensor& indices, const at::Tensor& offsets, const c10::optional<at::Tensor>& psw_opt,
                     bool training) {
    check_tensor("forward", "indices", indices, at::kLong, 1);
    check_tensor("forward", "offsets", offsets, at::kLong, 1);
    at::Tensor psw;
    if (psw_opt.has_value() && psw_opt->defined()) {
      psw = *psw_opt;
      check_tensor("forward", "per_sample_weights", psw, at::kFloat, 1);
      if (psw.numel() != indices.numel())
        throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.forward: per_sample_weights has " +
                                    std::to_string(psw.numel()) + " elements but indices has " +
                                    std::to_string(indices.numel()));
      if (pooling_ == mpe::Pooling::Mean)
        throw std::invalid_argument(
            "mpe_torch.TableBatchedEmbeddingBags.forward: per_sample_weights need pooling_mode 'sum' (this module "
            "pools by 'mean'), as in FBGEMM and torch.nn.EmbeddingBag");
    }
    const int64_t T = num_tables();
    const int64_t m = offsets.numel();
    if (m < 1 || (m - 1) % T != 0)
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.forward: offsets has " + std::to_string(m) +
                                  " elements; it must have T*B + 1 with T = " + std::to_string(T) + " tables");
    const int64_t B = (m - 1) / T;
    at::Tensor out = at::empty({B, total_dim_}, at::TensorOptions().dtype(at::kFloat));
    const std::span<const std::int64_t> idx = cspan<std::int64_t>(indices), off = cspan<std::int64_t>(offsets);
    const std::span<const float> w = psw.defined() ? cspan<float>(psw) : std::span<const float>{};
    {
      py::gil_scoped_release nogil;
      if (training) pending_ = false;  // a failing forward leaves no batch for backward()
      if (groups_.size() == 1) {
        std::span<float> o = mspan<float>(out);
        if (training) groups_[0]->forward(idx, off, o, pooling_, w);
        else groups_[0]->forward_inference(idx, off, o, pooling_, w);
      } else {
        validate_csr(idx, off, w, B);
        for (std::size_t g = 0; g < groups_.size(); ++g) {
          split_group(g, idx, off, w, B);
          GroupBuf& b = bufs_[g];
          const std::size_t k = group_tables_[g].size();
          b.out.resize(static_cast<std::size_t>(B) * k * static_cast<std::size_t>(group_dim_[g]));
          const std::span<const float> gw = w.empty() ? std::span<const float>{} : std::span<const float>(b.psw);
          if (training) groups_[g]->forward(b.indices, b.offsets, b.out, pooling_, gw);
          else groups_[g]->forward_inference(b.indices, b.offsets, b.out, pooling_, gw);
          scatter(g, b.out.data(), out.data_ptr<float>(), B);
        }
      }
      if (training) {
        pending_ = true;
        pending_B_ = B;
        ++forward_id_;
      }
    }
    return out;
  }

  /// Fused optimizer step for the last training forward: grad_output (B, sum D_t) float32.
  void backward(const at::Tensor& grad_output, int64_t forward_id) {
    check_tensor("backward", "grad_output", grad_output, at::kFloat, 2);
    if (!pending_ || forward_id != forward_id_)
      throw std::logic_error(
          "mpe_torch.TableBatchedEmbeddingBags.backward: this output is not from the module's last training forward "
          "(the optimizer is fused into backward: run backward once per forward, before the next forward)");
    if (grad_output.size(0) != pending_B_ || grad_output.size(1) != total_dim_)
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.backward: grad_output has shape " +
                                  shape_str(grad_output) + ", expected (" + std::to_string(pending_B_) + ", " +
                                  std::to_string(total_dim_) + ")");
    const std::span<const float> g = cspan<float>(grad_output);
    py::gil_scoped_release nogil;
    if (groups_.size() == 1) {
      groups_[0]->backward(g, opt_);
    } else {
      // A non-finite gradient is refused before any group steps (all or nothing).
      for (std::size_t i = 0; i < g.size(); ++i) {
        if (!std::isfinite(g[i])) {
          const std::size_t b = i / static_cast<std::size_t>(total_dim_), c = i % static_cast<std::size_t>(total_dim_);
          throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.backward: grad_output[" + std::to_string(b) +
                                      ", " + std::to_string(c) + "] = " + std::to_string(g[i]) + " is not finite");
        }
      }
      for (std::size_t k = 0; k < groups_.size(); ++k) {
        GroupBuf& b = bufs_[k];
        gather(k, grad_output.data_ptr<float>(), b.out, pending_B_);
        groups_[k]->backward(b.out, opt_);
      }
    }
    pending_ = false;
  }

  int64_t forward_id() const { return forward_id_; }

  void set_learning_rate(double lr) {
    OptSpec o = opt_;
    o.learning_rate = static_cast<float>(lr);
    if (const std::string why = check_optimizer(o); !why.empty()) throw std::invalid_argument("mpe_torch: " + why);
    opt_ = o;
  }
  void set_hyperparameters(double lr, double eps, double beta1, double beta2) {
    OptSpec o = opt_;
    o.learning_rate = static_cast<float>(lr);
    o.eps = static_cast<float>(eps);
    o.beta1 = static_cast<float>(beta1);
    o.beta2 = static_cast<float>(beta2);
    if (const std::string why = check_optimizer(o); !why.empty()) throw std::invalid_argument("mpe_torch: " + why);
    opt_ = o;
  }
  double learning_rate() const { return opt_.learning_rate; }
  py::dict optimizer_params() const {
    py::dict d;
    const char* names[] = {"sgd", "rowwise_adagrad", "adagrad", "adam"};
    d["optimizer"] = names[static_cast<int>(opt_.kind)];
    d["learning_rate"] = opt_.learning_rate;
    d["eps"] = opt_.eps;
    d["beta1"] = opt_.beta1;
    d["beta2"] = opt_.beta2;
    return d;
  }

  /// Exact state: one uint8 tensor per group, mpe's checkpoint bytes (MPECKPT1).
  std::vector<at::Tensor> state() const {
    std::vector<at::Tensor> out;
    for (const auto& g : groups_) {
      TempPath tmp;
      {
        py::gil_scoped_release nogil;
        g->save(tmp.path);
      }
      const auto n = static_cast<int64_t>(std::filesystem::file_size(tmp.path));
      at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kByte));
      std::ifstream f(tmp.path, std::ios::binary);
      f.read(reinterpret_cast<char*>(t.data_ptr<uint8_t>()), n);
      if (!f) throw std::runtime_error("mpe_torch: cannot read back the checkpoint " + tmp.path.string());
      out.push_back(t);
    }
    return out;
  }

  /// Replaces the state of every group, or of none: each group's bytes are loaded (and
  /// fully verified by mpe) into a new object first; all are swapped in only if all load.
  void load_state(const std::vector<at::Tensor>& states) {
    if (states.size() != groups_.size())
      throw std::invalid_argument("mpe_torch: the state has " + std::to_string(states.size()) +
                                  " groups, this module " + std::to_string(groups_.size()) +
                                  " (one per distinct D, in order of first appearance)");
    std::vector<std::unique_ptr<Group>> fresh;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      check_tensor("load_state_dict", "group state", states[g], at::kByte, 1);
      TempPath tmp;
      {
        std::ofstream f(tmp.path, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(states[g].data_ptr<uint8_t>()), states[g].numel());
        f.close();
        if (!f) throw std::runtime_error("mpe_torch: cannot write the temporary file " + tmp.path.string());
      }
      fresh.push_back(groups_[g]->fresh());
      py::gil_scoped_release nogil;
      fresh.back()->load(tmp.path);
    }
    for (std::size_t g = 0; g < groups_.size(); ++g) groups_[g]->swap(*fresh[g]);
    pending_ = false;
  }

  at::Tensor export_table(int64_t t, const std::string& layout, int64_t alignment, bool scale_bias_last,
                          const std::string& format) {
    check_table(t);
    const LayoutSpec l = parse_layout(layout, alignment, scale_bias_last);
    const Target target = parse_target(format);
    Group& g = *groups_[static_cast<std::size_t>(table_group_[t])];
    const std::size_t rb = g.export_row_bytes(l, target);
    std::vector<std::uint8_t> bytes;
    {
      py::gil_scoped_release nogil;
      bytes = g.export_table(table_local_[t], l, target);
    }
    at::Tensor out = at::empty({rows_[t], static_cast<int64_t>(rb)}, at::TensorOptions().dtype(at::kByte));
    if (bytes.size() != static_cast<std::size_t>(out.numel()))
      throw std::logic_error("mpe_torch: export size mismatch");
    std::memcpy(out.data_ptr<uint8_t>(), bytes.data(), bytes.size());
    return out;
  }

  int64_t import_table(int64_t t, const at::Tensor& data, const std::string& layout, int64_t alignment,
                       bool scale_bias_last) {
    check_table(t);
    const LayoutSpec l = parse_layout(layout, alignment, scale_bias_last);
    check_tensor("import_table", "data", data, at::kByte, 2);
    Group& g = *groups_[static_cast<std::size_t>(table_group_[t])];
    const std::size_t rb = g.export_row_bytes(l, Target::Same);
    if (data.size(0) != rows_[t] || static_cast<std::size_t>(data.size(1)) != rb)
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.import_table: data has shape " + shape_str(data) +
                                  ", expected (" + std::to_string(rows_[t]) + ", " + std::to_string(rb) +
                                  ") for table " + std::to_string(t) + " in this layout");
    py::gil_scoped_release nogil;
    return g.import_table(table_local_[t], l, cspan<std::uint8_t>(data));
  }

  at::Tensor get_weights(int64_t t) const {
    check_table(t);
    at::Tensor out = at::empty({rows_[t], dims_[t]}, at::TensorOptions().dtype(at::kFloat));
    const Group& g = *groups_[static_cast<std::size_t>(table_group_[t])];
    py::gil_scoped_release nogil;
    g.get_weights(mspan<float>(out), g.table_offset(table_local_[t]));
    return out;
  }

  void set_weights(int64_t t, const at::Tensor& w) {
    check_table(t);
    check_tensor("set_weights", "weights", w, at::kFloat, 2);
    if (w.size(0) != rows_[t] || w.size(1) != dims_[t])
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.set_weights: weights has shape " + shape_str(w) +
                                  ", table " + std::to_string(t) + " is (" + std::to_string(rows_[t]) + ", " +
                                  std::to_string(dims_[t]) + ")");
    Group& g = *groups_[static_cast<std::size_t>(table_group_[t])];
    py::gil_scoped_release nogil;
    g.set_weights(cspan<float>(w), g.table_offset(table_local_[t]));
  }

  void init_uniform(double low, double high) {
    py::gil_scoped_release nogil;
    for (auto& g : groups_) g->init_uniform(static_cast<float>(low), static_cast<float>(high));
  }

  void flush() {
    py::gil_scoped_release nogil;
    for (auto& g : groups_) g->flush();
  }

  py::dict stats() const {
    mpe::CacheStats s;
    for (const auto& g : groups_) add_stats(s, g->stats());
    return stats_dict(s);
  }
  void reset_stats() {
    for (auto& g : groups_) g->reset_stats();
  }
  py::dict memory() const {
    mpe::MemoryFootprint m;
    for (const auto& g : groups_) m += g->memory();
    return memory_dict(m);
  }
  uint64_t step() const { return groups_.front()->step(); }

  /// One dict per group: D, tables (spec indices), type, cache slots, stats, memory.
  py::list groups() const {
    py::list l;
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      py::dict d;
      d["dim"] = group_dim_[g];
      d["tables"] = group_tables_[g];
      d["type"] = groups_[g]->type_name();
      d["cache_slots"] = groups_[g]->cache_slots();
      d["seed"] = groups_[g]->config().seed;
      d["stats"] = stats_dict(groups_[g]->stats());
      d["memory"] = memory_dict(groups_[g]->memory());
      l.append(d);
    }
    return l;
  }

 private:
  struct GroupBuf {
    std::vector<std::int64_t> indices, offsets;
    std::vector<float> psw, out;
  };

  void check_table(int64_t t) const {
    if (t < 0 || t >= num_tables())
      throw py::index_error("mpe_torch: table = " + std::to_string(t) + " is outside [0, " +
                            std::to_string(num_tables()) + ")");
  }

  /// The checks mpe's forward makes, on the whole input, before any group runs (so a bad
  /// input changes no group, and messages name the caller's positions and tables).
  void validate_csr(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<const float> w,
                    int64_t B) const {
    const char* fn = "mpe_torch.TableBatchedEmbeddingBags.forward: ";
    const auto n = static_cast<int64_t>(idx.size());
    if (off[0] != 0) throw std::invalid_argument(std::string(fn) + "offsets[0] = " + std::to_string(off[0]) + " must be 0");
    for (std::size_t j = 1; j < off.size(); ++j) {
      if (off[j] < off[j - 1])
        throw std::invalid_argument(std::string(fn) + "offsets[" + std::to_string(j) + "] = " + std::to_string(off[j]) +
                                    " < offsets[" + std::to_string(j - 1) + "] = " + std::to_string(off[j - 1]));
    }
    if (off.back() != n)
      throw std::invalid_argument(std::string(fn) + "offsets[" + std::to_string(off.size() - 1) +
                                  "] = " + std::to_string(off.back()) + " must equal indices.numel() = " +
                                  std::to_string(n));
    for (int64_t t = 0; t < num_tables(); ++t) {
      for (int64_t j = t * B; j < (t + 1) * B; ++j) {
        for (int64_t p = off[static_cast<std::size_t>(j)]; p < off[static_cast<std::size_t>(j + 1)]; ++p) {
          const int64_t r = idx[static_cast<std::size_t>(p)];
          if (r < 0 || r >= rows_[static_cast<std::size_t>(t)])
            throw std::invalid_argument(std::string(fn) + "indices[" + std::to_string(p) + "] = " + std::to_string(r) +
                                        " is outside table " + std::to_string(t) + " (" +
                                        std::to_string(rows_[static_cast<std::size_t>(t)]) + " rows; bag " +
                                        std::to_string(j) + ")");
        }
      }
    }
    for (std::size_t p = 0; p < w.size(); ++p) {
      if (!std::isfinite(w[p]))
        throw std::invalid_argument(std::string(fn) + "per_sample_weights[" + std::to_string(p) +
                                    "] = " + std::to_string(w[p]) + " is not finite");
    }
  }

  /// Group g's own CSR: its tables' bags in order, offsets rebased.
  void split_group(std::size_t g, std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                   std::span<const float> w, int64_t B) {
    GroupBuf& b = bufs_[g];
    const auto& tabs = group_tables_[g];
    std::size_t count = 0;
    for (int64_t t : tabs) count += static_cast<std::size_t>(off[static_cast<std::size_t>((t + 1) * B)] - off[static_cast<std::size_t>(t * B)]);
    b.indices.resize(count);
    b.psw.resize(w.empty() ? 0 : count);
    b.offsets.resize(tabs.size() * static_cast<std::size_t>(B) + 1);
    b.offsets[0] = 0;
    std::size_t pos = 0, j = 0;
    for (int64_t t : tabs) {
      const auto first = static_cast<std::size_t>(off[static_cast<std::size_t>(t * B)]);
      const auto last = static_cast<std::size_t>(off[static_cast<std::size_t>((t + 1) * B)]);
      std::copy(idx.begin() + static_cast<std::ptrdiff_t>(first), idx.begin() + static_cast<std::ptrdiff_t>(last),
                b.indices.begin() + static_cast<std::ptrdiff_t>(pos));
      if (!w.empty())
        std::copy(w.begin() + static_cast<std::ptrdiff_t>(first), w.begin() + static_cast<std::ptrdiff_t>(last),
                  b.psw.begin() + static_cast<std::ptrdiff_t>(pos));
      for (int64_t i = 0; i < B; ++i)
        b.offsets[++j] = static_cast<std::int64_t>(pos) + off[static_cast<std::size_t>(t * B + i + 1)] -
                         static_cast<std::int64_t>(first);
      pos += last - first;
    }
  }

  /// Group output (B, k*D_g) -> columns of its tables in out (B, sum D_t).
  void scatter(std::size_t g, const float* src, float* out, int64_t B) const {
    const auto& tabs = group_tables_[g];
    const auto D = static_cast<std::size_t>(group_dim_[g]);
    const std::size_t k = tabs.size();
    for (int64_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < k; ++i)
        std::memcpy(out + static_cast<std::size_t>(b) * static_cast<std::size_t>(total_dim_) +
                        static_cast<std::size_t>(table_col_[static_cast<std::size_t>(tabs[i])]),
                    src + (static_cast<std::size_t>(b) * k + i) * D, D * sizeof(float));
  }

  /// Columns of group g's tables in grad (B, sum D_t) -> dst (B, k*D_g).
  void gather(std::size_t g, const float* grad, std::vector<float>& dst, int64_t B) const {
    const auto& tabs = group_tables_[g];
    const auto D = static_cast<std::size_t>(group_dim_[g]);
    const std::size_t k = tabs.size();
    dst.resize(static_cast<std::size_t>(B) * k * D);
    for (int64_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < k; ++i)
        std::memcpy(dst.data() + (static_cast<std::size_t>(b) * k + i) * D,
                    grad + static_cast<std::size_t>(b) * static_cast<std::size_t>(total_dim_) +
                        static_cast<std::size_t>(table_col_[static_cast<std::size_t>(tabs[i])]),
                    D * sizeof(float));
  }

  mpe::Pooling pooling_;
  OptSpec opt_;
  std::vector<int64_t> rows_, dims_, table_group_, table_local_, table_col_;
  int64_t total_dim_ = 0;
  std::vector<int64_t> group_dim_;
  std::vector<std::vector<int64_t>> group_tables_;
  std::vector<std::unique_ptr<Group>> groups_;
  std::vector<GroupBuf> bufs_;
  bool pending_ = false;
  int64_t pending_B_ = 0;
  int64_t forward_id_ = 0;
};

}  // namespace mpe_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using mpe_torch::Tbe;
  m.doc() = "mpe_torch._C: the C++ core of mpe_torch.TableBatchedEmbeddingBags (use the Python class).";
  py::register_exception<mpe::checkpoint_error>(m, "CheckpointError", PyExc_RuntimeError);
  m.def("built_combinations", &mpe_torch::built_combinations,
        "The storage/cache/rounding combinations compiled into this build.");
  py::class_<Tbe>(m, "Tbe")
      .def(py::init<const std::vector<std::pair<int64_t, int64_t>>&, const std::string&, const std::string&, double,
                    const std::string&, const std::string&, const std::string&, double, double, double, double,
                    uint64_t, int64_t>(),
           py::arg("specs"), py::arg("storage"), py::arg("cache"), py::arg("cache_fraction"), py::arg("rounding"),
           py::arg("pooling"), py::arg("optimizer"), py::arg("learning_rate"), py::arg("eps"), py::arg("beta1"),
           py::arg("beta2"), py::arg("seed"), py::arg("ways"))
      .def_property_readonly("num_tables", &Tbe::num_tables)
      .def_property_readonly("total_dim", &Tbe::total_dim)
      .def_property_readonly("forward_id", &Tbe::forward_id)
      .def_property_readonly("step", &Tbe::step)
      .def_property_readonly("learning_rate", &Tbe::learning_rate)
      .def("forward", &Tbe::forward, py::arg("indices"), py::arg("offsets"), py::arg("per_sample_weights"),
           py::arg("training"))
      .def("backward", &Tbe::backward, py::arg("grad_output"), py::arg("forward_id"))
      .def("set_learning_rate", &Tbe::set_learning_rate, py::arg("lr"))
      .def("optimizer_params", &Tbe::optimizer_params)
      .def("set_hyperparameters", &Tbe::set_hyperparameters, py::arg("lr"), py::arg("eps"), py::arg("beta1"),
           py::arg("beta2"))
      .def("state", &Tbe::state)
      .def("load_state", &Tbe::load_state, py::arg("states"))
      .def("export_table", &Tbe::export_table, py::arg("table"), py::arg("layout"), py::arg("alignment"),
           py::arg("scale_bias_last"), py::arg("format"))
      .def("import_table", &Tbe::import_table, py::arg("table"), py::arg("data"), py::arg("layout"),
           py::arg("alignment"), py::arg("scale_bias_last"))
      .def("get_weights", &Tbe::get_weights, py::arg("table"))
      .def("set_weights", &Tbe::set_weights, py::arg("table"), py::arg("weights"))
      .def("init_uniform", &Tbe::init_uniform, py::arg("low"), py::arg("high"))
      .def("flush", &Tbe::flush)
      .def("stats", &Tbe::stats)
      .def("reset_stats", &Tbe::reset_stats)
      .def("memory", &Tbe::memory)
      .def("groups", &Tbe::groups);
}
