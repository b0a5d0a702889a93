// SPDX-License-Identifier: Apache-2.0
// mpe_torch._C: the tensor-facing core of mpe_torch.TableBatchedEmbeddingBags. Compiled a
// second time with MPE_TORCH_CUDA defined (cuda_binding.cpp) as mpe_torch._C_cuda: the same
// class over the CUDA module's groups (cuda_group.hpp), its tensors on one CUDA device.
//
// One `Tbe` holds one mpe::MixedDimEmbedding over T tables given as (rows, D) specs (any
// mix of D: the core groups them by D, one CachedEmbedding per distinct D, and splits,
// scatters and gathers the batch, all groups stepping together or none). The binding checks
// tensors and keeps the autograd bookkeeping (which forward a backward belongs to).
//
// Tensor arguments are checked, never converted: dtype (TypeError), device (the module's:
// the CPU for _C, its CUDA device for _C_cuda), dimensions, shape and contiguity (ValueError).
// mpe's exceptions pass through pybind11's translation: std::invalid_argument -> ValueError,
// std::logic_error -> RuntimeError, mpe::checkpoint_error -> mpe_torch.CheckpointError (a
// RuntimeError; _C_cuda raises _C's class).
//
// CUDA (_C_cuda): the groups queue their work on the CUDA stream that was current (torch's,
// c10::cuda::getCurrentCUDAStream) when the module was built, their device memory from torch's
// caching allocator (TorchCudaAllocator). A forward or backward called while another stream
// is current is ordered after that stream's queued work and before its later work by CUDA
// events (StreamOrder), with no host synchronization.
#include <torch/extension.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "group.hpp"
#include "tensors.hpp"
#include "tiered_binding.hpp"

#ifdef MPE_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda_group.hpp"
#endif

namespace py = pybind11;

namespace mpe_torch {
namespace {

/// tensors.hpp's check_tensor_arg for an argument of TableBatchedEmbeddingBags.`fn`.
void check_tensor(const char* fn, const char* name, const at::Tensor& t, at::ScalarType dtype, int64_t dims,
                  const at::Device& device = at::Device(at::kCPU)) {
  check_tensor_arg("TableBatchedEmbeddingBags", fn, name, t, dtype, dims, device);
}

#ifdef MPE_TORCH_CUDA
/// mpe::CudaAllocator over torch's CUDA caching allocator: the groups' device memory comes
/// from (and returns to) torch's pool, reused in stream order as mpe's contract asks.
class TorchCudaAllocator final : public mpe::CudaAllocator {
 public:
  /// Throws c10::OutOfMemoryError (a std::exception) when torch's pool cannot serve `bytes`.
  void* allocate(std::size_t bytes, mpe::MemoryPurpose, cudaStream_t stream) override {
    return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream);
  }
  void deallocate(void* p, std::size_t, mpe::MemoryPurpose, cudaStream_t) noexcept override {
    c10::cuda::CUDACachingAllocator::raw_delete(p);
  }
};

/// `waiter` waits (on the device) for the work queued so far on `producer`.
void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  cudaEvent_t e = nullptr;
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(e, producer);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, e, 0);
  cudaEventDestroy(e);  // released once the waits on it are done
  C10_CUDA_CHECK(err);
}

/// For one call's scope: when torch's current stream differs from the module's own, the
/// module's stream first waits for the current one (the inputs it produced) and, at the end
/// of the scope, the current stream waits for the module's (the outputs, and the reuse of the
/// inputs' memory). Events only: the host never waits here.
class StreamOrder {
 public:
  StreamOrder(cudaStream_t own, const at::Device& device)
      : guard_(device), own_(own), user_(c10::cuda::getCurrentCUDAStream(device.index()).stream()) {
    if (user_ != own_) stream_wait(own_, user_);
  }
  ~StreamOrder() {
    if (user_ == own_) return;
    try {
      stream_wait(user_, own_);
    } catch (...) {  // a destructor cannot throw; the next CUDA call reports a sticky error
    }
  }
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

 private:
  c10::cuda::CUDAGuard guard_;
  cudaStream_t own_, user_;
};

StorePlacement parse_placement(const std::string& p) {
  if (p == "device") return StorePlacement::Device;
  if (p == "host_mapped") return StorePlacement::HostMapped;
  if (p == "managed") return StorePlacement::Managed;
  throw std::invalid_argument("mpe_torch: store_placement = '" + p +
                              "' is not one of 'device', 'host_mapped', 'managed'");
}
#else
/// The host module's stand-in: nothing to order.
struct StreamOrder {
  StreamOrder(std::nullptr_t, const at::Device&) {}
};
#endif

mpe::Pooling parse_pooling(const std::string& p) {
  if (p == "sum") return mpe::Pooling::Sum;
  if (p == "mean") return mpe::Pooling::Mean;
  throw std::invalid_argument("mpe_torch: pooling_mode = '" + p + "' is not one of 'sum', 'mean'");
}

std::string quoted_names(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "'" : ", '") + s + "'";
  return out;
}

int parse_optimizer(const std::string& o) {
  const int i = index_of(Optimizers{}, o);
  if (i < 0)
    throw std::invalid_argument("mpe_torch: optimizer = '" + o + "' is not one of " +
                                quoted_names(names(Optimizers{})));
  return i;
}

/// The cache policy names the module accepts: "none", then the Caches list.
std::vector<std::string> cache_names() {
  std::vector<std::string> v{std::string(kNoCacheName)};
  for (auto& n : names(Caches{})) v.push_back(n);
  return v;
}

/// The optimizer's default eps: its struct's default member initializer (1e-8 if it has none).
double default_eps(const std::string& optimizer) {
  double eps = 1e-8;
  visit_index(Optimizers{}, parse_optimizer(optimizer), [&]<class O>() {
    if constexpr (requires { O{}.eps; }) eps = O{}.eps;
  });
  return eps;
}

LayoutSpec parse_layout(const std::string& layout, int64_t alignment, bool scale_bias_last) {
  LayoutSpec l;
  if (layout == "fbgemm_fused")
    l.layout = Layout::Fused;
  else if (layout == "tbe_inference")
    l.layout = Layout::TbeInference;
  else
    throw std::invalid_argument("mpe_torch: layout = '" + layout +
                                "' is not one of 'fbgemm_fused', 'tbe_inference'");
  if (alignment < 1 || alignment > (int64_t{1} << 20))
    throw std::invalid_argument("mpe_torch: alignment = " + std::to_string(alignment) +
                                " must be in [1, 2^20]");
  l.alignment = static_cast<std::int32_t>(alignment);
  l.scale_bias_last = scale_bias_last;
  if (scale_bias_last && l.layout != Layout::TbeInference)
    throw std::invalid_argument("mpe_torch: scale_bias_last applies to layout 'tbe_inference' only");
  return l;
}

/// kSameFormat for None/"same", else the index of `f` in ExportFormats.
int parse_target(const std::string& f) {
  if (f.empty() || f == "same") return kSameFormat;
  const int i = index_of(ExportFormats{}, f);
  if (i < 0)
    throw std::invalid_argument("mpe_torch: format = '" + f + "' is not one of None, " +
                                quoted_names(names(ExportFormats{})));
  return i;
}

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

// A number given as a Python float (double) stored as mpe's float: refused where float32
// cannot hold it (a finite value beyond its range would become inf, a nonzero one below its
// smallest subnormal 0), so the error names the value given, not the converted one. NaN and
// infinities pass through to mpe's own check (check_optimizer), which names them.
float float_arg(const char* name, double v) {
  const auto f = static_cast<float>(v);
  if (std::isfinite(v) && (!std::isfinite(f) || (v != 0.0 && f == 0.0f))) {
    char buf[32];  // the shortest text that reads back as v (std::to_chars)
    const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
    throw std::invalid_argument("mpe_torch: " + std::string(name) + " = " + std::string(buf, end) +
                                " is outside float32's range (mpe stores it as float)");
  }
  return f;
}
/// A module's tables and policies, checked: what TableBatchedEmbeddingBags and planned_memory
/// share. Throws std::invalid_argument for an empty spec list, a cache_fraction outside
/// [0, 1], an unknown cache name, cache "none" with cache_fraction > 0 and a spec with rows < 1
/// or D outside [1, 2^20] (the other names are checked by make_group / planned_memory, the
/// keys by MixedDimEmbedding).
struct ModuleSpec {
  mpe::MixedDimConfig cfg;  // tables, cache_fraction, slot_index, row_keys, column_keys
  PolicyNames names;
};
ModuleSpec module_spec(const std::vector<std::pair<int64_t, int64_t>>& specs, const std::string& storage,
                       const std::string& cache, double cache_fraction, const std::string& rounding,
                       const std::string& state_precision, bool slot_index,
                       const std::vector<int64_t>& row_keys, const std::vector<int64_t>& column_keys) {
  if (specs.empty())
    throw std::invalid_argument("mpe_torch: specs is empty; give at least one (rows, D) table");
  if (!(cache_fraction >= 0.0 && cache_fraction <= 1.0))
    throw std::invalid_argument("mpe_torch: cache_fraction = " + std::to_string(cache_fraction) +
                                " must be in [0, 1]");
  const bool no_cache = cache == kNoCacheName;
  if (!no_cache && index_of(Caches{}, cache) < 0)
    throw std::invalid_argument("mpe_torch: cache = '" + cache + "' is not one of " +
                                quoted_names(cache_names()));
  if (no_cache && cache_fraction > 0)
    throw std::invalid_argument(
        "mpe_torch: cache = 'none' with cache_fraction = " + std::to_string(cache_fraction) +
        " > 0; name a cache policy (" + quoted_names(names(Caches{})) + ")");
  ModuleSpec m;
  for (std::size_t t = 0; t < specs.size(); ++t) {
    const auto [rows, dim] = specs[t];
    if (rows < 1 || dim < 1 || dim > (int64_t{1} << 20))
      throw std::invalid_argument("mpe_torch: specs[" + std::to_string(t) + "] = (" + std::to_string(rows) +
                                  ", " + std::to_string(dim) + "): rows must be >= 1 and D in [1, 2^20]");
    m.cfg.tables.push_back(mpe::TableSpec{rows, static_cast<std::int32_t>(dim)});
  }
  m.cfg.cache_fraction = no_cache ? 0.0 : cache_fraction;
  m.cfg.slot_index = slot_index;
  // One per table or none (checked by MixedDimEmbedding, naming config.row_keys[t] /
  // config.column_keys[t] in spec order).
  m.cfg.row_keys.assign(row_keys.begin(), row_keys.end());
  m.cfg.column_keys.assign(column_keys.begin(), column_keys.end());
  m.names =
      PolicyNames{storage, no_cache ? std::string(py_name<NoCache>()) : cache, rounding, state_precision};
  return m;
}

#ifndef MPE_TORCH_CUDA
/// mpe_torch.planned_memory: memory() of the module these arguments build, after one training
/// step (workspace 0), from the configuration alone (MixedDimEmbedding::planned_memory through
/// the registry): nothing is built or allocated.
py::dict planned_memory_dict(const std::vector<std::pair<int64_t, int64_t>>& specs,
                             const std::string& storage, const std::string& cache, double cache_fraction,
                             const std::string& rounding, const std::string& optimizer,
                             const std::string& state_precision, bool slot_index,
                             const std::vector<int64_t>& row_keys, const std::vector<int64_t>& column_keys) {
  const ModuleSpec m = module_spec(specs, storage, cache, cache_fraction, rounding, state_precision,
                                   slot_index, row_keys, column_keys);
  return memory_dict(planned_memory(m.names, m.cfg, parse_optimizer(optimizer)));
}
#endif

}  // namespace

class Tbe {
 public:
  Tbe(const std::vector<std::pair<int64_t, int64_t>>& specs, const std::string& storage,
      const std::string& cache, double cache_fraction, const std::string& rounding,
      const std::string& state_precision, const std::string& pooling, const std::string& optimizer,
      double learning_rate, double eps, double beta1, double beta2, uint64_t seed,
      const std::string& non_finite, bool slot_index, bool defer_admission,
      const std::vector<int64_t>& row_keys, const std::vector<int64_t>& column_keys, double max_range_growth
#ifdef MPE_TORCH_CUDA
      ,
      int64_t device_index, const std::string& store_placement
#endif
      )
      : pooling_(parse_pooling(pooling)) {
    if (non_finite != "raise" && non_finite != "skip")
      throw std::invalid_argument("mpe_torch: non_finite = '" + non_finite +
                                  "' is not one of 'raise', 'skip'");
    ModuleSpec m = module_spec(specs, storage, cache, cache_fraction, rounding, state_precision, slot_index,
                               row_keys, column_keys);
    opt_.optimizer = parse_optimizer(optimizer);
    opt_.learning_rate = float_arg("learning_rate", learning_rate);
    opt_.eps = float_arg("eps", eps);
    opt_.beta1 = float_arg("beta1", beta1);
    opt_.beta2 = float_arg("beta2", beta2);
    if (const std::string why = check_optimizer(opt_); !why.empty())
      throw std::invalid_argument("mpe_torch: " + why);
    for (const auto& [rows, dim] : specs) {
      rows_.push_back(rows);
      dims_.push_back(dim);
    }
    mpe::MixedDimConfig& cfg = m.cfg;
    cfg.seed = seed;
    cfg.non_finite = non_finite == "skip" ? mpe::NonFinite::Skip : mpe::NonFinite::Throw;
    cfg.defer_admission = defer_admission;
    cfg.max_range_growth = float_arg("max_range_growth", max_range_growth);  // MixedDimEmbedding checks it
#ifdef MPE_TORCH_CUDA
    const StorePlacement placement = parse_placement(store_placement);
    if (device_index < 0 || device_index >= c10::cuda::device_count())
      throw std::invalid_argument("mpe_torch: device = cuda:" + std::to_string(device_index) +
                                  " is not one of the " + std::to_string(c10::cuda::device_count()) +
                                  " CUDA device(s)");
    device_ = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
    c10::cuda::CUDAGuard guard(device_);
    stream_ = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    CudaContext ctx;
    ctx.stream = stream_;
    ctx.device = static_cast<int>(device_index);
    ctx.placement = placement;
    ctx.allocator = std::make_shared<TorchCudaAllocator>();
    emb_ = make_cuda_group(m.names, cfg, ctx);
#else
    emb_ = make_group(m.names, cfg);
#endif
  }

  int64_t num_tables() const { return static_cast<int64_t>(rows_.size()); }
  int64_t total_dim() const { return emb_->total_dim(); }

  /// Pooled lookup, (B, sum D_t) float32. `training`: MixedDimEmbedding::forward (populates
  /// the caches, remembered for backward); else forward_inference (changes nothing).
  at::Tensor forward(const at::Tensor& indices, const at::Tensor& offsets,
                     const c10::optional<at::Tensor>& psw_opt, bool training) {
    check_tensor("forward", "indices", indices, at::kLong, 1, device_);
    check_tensor("forward", "offsets", offsets, at::kLong, 1, device_);
    at::Tensor psw;
    if (psw_opt.has_value() && psw_opt->defined()) {
      psw = *psw_opt;
      check_tensor("forward", "per_sample_weights", psw, at::kFloat, 1, device_);
      if (psw.requires_grad())
        throw std::invalid_argument(
            "mpe_torch.TableBatchedEmbeddingBags.forward: per_sample_weights must not require grad "
            "(mpe_torch "
            "does not differentiate them)");
      if (psw.numel() != indices.numel())
        throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.forward: per_sample_weights has " +
                                    std::to_string(psw.numel()) + " elements but indices has " +
                                    std::to_string(indices.numel()));
      if (pooling_ == mpe::Pooling::Mean)
        throw std::invalid_argument(
            "mpe_torch.TableBatchedEmbeddingBags.forward: per_sample_weights need pooling_mode 'sum' (this "
            "module "
            "pools by 'mean'), as in FBGEMM and torch.nn.EmbeddingBag");
    }
    const int64_t T = num_tables();
    const int64_t m = offsets.numel();
    if (m < 1 || (m - 1) % T != 0)
      throw std::invalid_argument(
          "mpe_torch.TableBatchedEmbeddingBags.forward: offsets has " + std::to_string(m) +
          " elements; it must have T*B + 1 with T = " + std::to_string(T) + " tables");
    const int64_t B = (m - 1) / T;
    at::Tensor out = at::empty({B, total_dim()}, at::TensorOptions().dtype(at::kFloat).device(device_));
    const std::span<const std::int64_t> idx = cspan<std::int64_t>(indices),
                                        off = cspan<std::int64_t>(offsets);
    const std::span<const float> w = psw.defined() ? cspan<float>(psw) : std::span<const float>{};
    {
      py::gil_scoped_release nogil;
      StreamOrder order(stream_, device_);
      if (training) {
        // A refused batch leaves the forward awaiting backward as it was (MixedDimEmbedding
        // keeps it for bad input; after any other error its backward() refuses).
        emb_->forward(idx, off, mspan<float>(out), pooling_, w);
        pending_ = true;
        pending_B_ = B;
        ++forward_id_;
      } else {
        emb_->forward_inference(idx, off, mspan<float>(out), pooling_, w);
      }
    }
    return out;
  }

  /// Fused optimizer step for the last training forward: grad_output (B, sum D_t) float32.
  /// All groups step or none (MixedDimEmbedding::backward).
  void backward(const at::Tensor& grad_output, int64_t forward_id) {
    check_tensor("backward", "grad_output", grad_output, at::kFloat, 2, device_);
    if (!pending_ || forward_id != forward_id_)
      throw std::logic_error(
          "mpe_torch.TableBatchedEmbeddingBags.backward: this output is not from the module's last training "
          "forward "
          "(the optimizer is fused into backward: run backward once per forward, before the next forward)");
    if (grad_output.size(0) != pending_B_ || grad_output.size(1) != total_dim())
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.backward: grad_output has shape " +
                                  shape_str(grad_output) + ", expected (" + std::to_string(pending_B_) +
                                  ", " + std::to_string(total_dim()) + ")");
    const std::span<const float> g = cspan<float>(grad_output);
    {
      py::gil_scoped_release nogil;
      StreamOrder order(stream_, device_);
      try {
        emb_->backward(g, opt_);
      } catch (const std::invalid_argument& e) {
        // mpe's overflow message names the C++ setting; a Python user sets it by name. A
        // refused step changes nothing, so rethrowing with the new text loses nothing.
        std::string m = e.what();
        constexpr std::string_view cxx = "NonFinite::Skip";
        if (const std::size_t at = m.find(cxx); at != std::string::npos)
          m.replace(at, cxx.size(), "non_finite=\"skip\"");
        throw std::invalid_argument(m);
      }
    }
    pending_ = false;
  }

  int64_t forward_id() const { return forward_id_; }

  void set_learning_rate(double lr) {
    OptSpec o = opt_;
    o.learning_rate = float_arg("lr", lr);
    if (const std::string why = check_optimizer(o); !why.empty())
      throw std::invalid_argument("mpe_torch: " + why);
    opt_ = o;
  }
  void set_hyperparameters(double lr, double eps, double beta1, double beta2) {
    OptSpec o = opt_;
    o.learning_rate = float_arg("learning_rate", lr);
    o.eps = float_arg("eps", eps);
    o.beta1 = float_arg("beta1", beta1);
    o.beta2 = float_arg("beta2", beta2);
    if (const std::string why = check_optimizer(o); !why.empty())
      throw std::invalid_argument("mpe_torch: " + why);
    opt_ = o;
  }
  double learning_rate() const { return opt_.learning_rate; }
  py::dict optimizer_params() const {
    py::dict d;
    d["optimizer"] = names(Optimizers{})[static_cast<std::size_t>(opt_.optimizer)];
    d["learning_rate"] = opt_.learning_rate;
    d["eps"] = opt_.eps;
    d["beta1"] = opt_.beta1;
    d["beta2"] = opt_.beta2;
    return d;
  }

  /// Exact state: mpe's checkpoint bytes (MPEMIXD1, MixedDimEmbedding::save_bytes) as one
  /// uint8 tensor, built in memory.
  at::Tensor state() const {
    std::vector<std::uint8_t> bytes;
    {
      py::gil_scoped_release nogil;
      bytes = emb_->save_bytes();
    }
    return bytes_tensor(bytes);
  }

  /// Replaces the whole state, or nothing: mpe verifies all of the bytes (every group's
  /// checkpoint loaded into a new object) before swapping them in.
  void load_state(const at::Tensor& state) {
    check_tensor("load_state_dict", "mpe_state", state, at::kByte, 1);
    {
      py::gil_scoped_release nogil;
      emb_->load_bytes(cspan<std::uint8_t>(state));
    }
    pending_ = false;
  }

  at::Tensor export_table(int64_t t, const std::string& layout, int64_t alignment, bool scale_bias_last,
                          const std::string& format) {
    check_table(t);
    const LayoutSpec l = parse_layout(layout, alignment, scale_bias_last);
    const int target = parse_target(format);
    const std::size_t rb = emb_->export_row_bytes(t, l, target);
    std::vector<std::uint8_t> bytes;
    {
      py::gil_scoped_release nogil;
      bytes = emb_->export_table(t, l, target);
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
    const std::size_t rb = emb_->export_row_bytes(t, l, kSameFormat);
    if (data.size(0) != rows_[t] || static_cast<std::size_t>(data.size(1)) != rb)
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.import_table: data has shape " +
                                  shape_str(data) + ", expected (" + std::to_string(rows_[t]) + ", " +
                                  std::to_string(rb) + ") for table " + std::to_string(t) +
                                  " in this layout");
    py::gil_scoped_release nogil;
    return emb_->import_table(t, l, cspan<std::uint8_t>(data));
  }

  at::Tensor get_weights(int64_t t) const {
    check_table(t);
    at::Tensor out = at::empty({rows_[t], dims_[t]}, at::TensorOptions().dtype(at::kFloat));
    {
      py::gil_scoped_release nogil;
      emb_->get_weights(t, mspan<float>(out), 0);  // host memory (waits for the module's stream)
    }
    return device_.is_cpu() ? out : out.to(device_);
  }

  void set_weights(int64_t t, const at::Tensor& w) {
    check_table(t);
    check_tensor("set_weights", "weights", w, at::kFloat, 2, device_);
    if (w.size(0) != rows_[t] || w.size(1) != dims_[t])
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.set_weights: weights has shape " +
                                  shape_str(w) + ", table " + std::to_string(t) + " is (" +
                                  std::to_string(rows_[t]) + ", " + std::to_string(dims_[t]) + ")");
    const at::Tensor host = w.cpu();  // mpe reads weights from host memory (waits for the tensor)
    py::gil_scoped_release nogil;
    emb_->set_weights(t, cspan<float>(host), 0);
  }

  /// Copies row src_rows[i] of table t onto row dst_rows[i], i ascending (weights only: each
  /// destination keeps its optimizer state; a later pair reads what an earlier one wrote).
  /// src_rows, dst_rows: (k) int64 CPU tensors. Every row is checked before anything changes.
  void copy_rows(int64_t t, const at::Tensor& src, const at::Tensor& dst) {
    check_table(t);
    check_tensor("copy_rows", "src_rows", src, at::kLong, 1, at::Device(at::kCPU));
    check_tensor("copy_rows", "dst_rows", dst, at::kLong, 1, at::Device(at::kCPU));
    if (src.numel() != dst.numel())
      throw std::invalid_argument("mpe_torch.TableBatchedEmbeddingBags.copy_rows: src_rows has " +
                                  std::to_string(src.numel()) + " rows, dst_rows " +
                                  std::to_string(dst.numel()));
    const auto s = cspan<std::int64_t>(src), d = cspan<std::int64_t>(dst);
    for (const auto& [name, rows] : {std::pair{"src_rows", s}, std::pair{"dst_rows", d}}) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (rows[i] < 0 || rows[i] >= rows_[t])
          throw py::index_error("mpe_torch.TableBatchedEmbeddingBags.copy_rows: " + std::string(name) + "[" +
                                std::to_string(i) + "] = " + std::to_string(rows[i]) + " is outside [0, " +
                                std::to_string(rows_[t]) + ") of table " + std::to_string(t));
      }
    }
    std::vector<float> row(static_cast<std::size_t>(dims_[t]));
    py::gil_scoped_release nogil;
    for (std::size_t i = 0; i < s.size(); ++i) {
      emb_->get_weights(t, row, s[i]);  // host memory (waits for the module's stream)
      emb_->set_weights(t, row, d[i]);
    }
  }

  void init_uniform(double low, double high) {
    const float lo = float_arg("low", low), hi = float_arg("high", high);
    py::gil_scoped_release nogil;
    emb_->init_uniform(lo, hi);
  }

  /// A range per table: low and high of T values each (MixedDimEmbedding checks the sizes
  /// and ranges, naming the table).
  void init_uniform_tables(const std::vector<double>& low, const std::vector<double>& high) {
    std::vector<float> lo, hi;
    for (std::size_t t = 0; t < low.size(); ++t)
      lo.push_back(float_arg(("low[" + std::to_string(t) + "]").c_str(), low[t]));
    for (std::size_t t = 0; t < high.size(); ++t)
      hi.push_back(float_arg(("high[" + std::to_string(t) + "]").c_str(), high[t]));
    py::gil_scoped_release nogil;
    emb_->init_uniform_tables(lo, hi);
  }

  void flush() {
    py::gil_scoped_release nogil;
    emb_->flush();
  }

  py::dict stats() const { return stats_dict(emb_->stats()); }
  void reset_stats() { emb_->reset_stats(); }
  py::dict memory() const { return memory_dict(emb_->memory()); }
  uint64_t step() const { return emb_->step(); }

  /// One dict per D-group: D, tables (spec indices), type, cache slots, seed, stats, memory.
  py::list groups() const {
    py::list l;
    for (std::size_t g = 0; g < emb_->num_groups(); ++g) {
      py::dict d;
      d["dim"] = emb_->group_dim(g);
      d["tables"] = emb_->group_tables(g);
      d["type"] = emb_->type_name();
      d["cache_slots"] = emb_->group_cache_slots(g);
      d["seed"] = emb_->group_seed(g);
      d["stats"] = stats_dict(emb_->group_stats(g));
      d["memory"] = memory_dict(emb_->group_memory(g));
      l.append(d);
    }
    return l;
  }

 private:
  void check_table(int64_t t) const {
    if (t < 0 || t >= num_tables())
      throw py::index_error("mpe_torch: table = " + std::to_string(t) + " is outside [0, " +
                            std::to_string(num_tables()) + ")");
  }

  mpe::Pooling pooling_;
  at::Device device_ = at::Device(at::kCPU);  // where this module's tensors live
#ifdef MPE_TORCH_CUDA
  cudaStream_t stream_ = nullptr;  // the stream the groups queue on (current at construction)
#else
  std::nullptr_t stream_ = nullptr;
#endif
  OptSpec opt_;
  std::vector<int64_t> rows_, dims_;
  std::unique_ptr<Group> emb_;
  bool pending_ = false;
  int64_t pending_B_ = 0;
  int64_t forward_id_ = 0;
};

}  // namespace mpe_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using mpe_torch::Tbe;
#ifdef MPE_TORCH_CUDA
  m.doc() =
      "mpe_torch._C_cuda: the C++ core of mpe_torch.TableBatchedEmbeddingBags on CUDA devices (use the "
      "Python class with device='cuda').";
  // mpe's checkpoint errors arrive as the CPU module's class, mpe_torch.CheckpointError.
  {
    // A reference held for the process's life (never released at exit, when Python is gone).
    static py::handle checkpoint_error =
        py::object(py::module_::import("mpe_torch._C").attr("CheckpointError")).release();
    py::register_exception_translator([](std::exception_ptr p) {
      try {
        if (p) std::rethrow_exception(p);
      } catch (const mpe::checkpoint_error& e) {
        PyErr_SetString(checkpoint_error.ptr(), e.what());
      }
    });
  }
  m.def("built_combinations", &mpe_torch::built_cuda_combinations,
        "The storage/cache/rounding/state_precision combinations compiled into the CUDA module.");
#else
  m.doc() = "mpe_torch._C: the C++ core of mpe_torch.TableBatchedEmbeddingBags (use the Python class).";
  py::register_exception<mpe::checkpoint_error>(m, "CheckpointError", PyExc_RuntimeError);
  m.def("built_combinations", &mpe_torch::built_combinations,
        "The storage/cache/rounding/state_precision combinations compiled into this build.");
  m.def("planned_memory", &mpe_torch::planned_memory_dict, py::arg("specs"), py::arg("storage"),
        py::arg("cache"), py::arg("cache_fraction"), py::arg("rounding"), py::arg("optimizer"),
        py::arg("state_precision"), py::arg("slot_index"), py::arg("row_keys"), py::arg("column_keys"),
        "memory() of the module these arguments build, after one training step (workspace 0), "
        "computed without building it (use mpe_torch.planned_memory).");
  mpe_torch::bind_tiered_rows(m);  // host code: the CPU module only
#endif
  // The variant lists (csrc/variants.hpp), as the Python API names them.
  m.def("storages", [] { return mpe_torch::names(mpe_torch::Storages{}); });
  m.def("caches", &mpe_torch::cache_names);
  m.def("roundings", [] { return mpe_torch::names(mpe_torch::Roundings{}); });
  m.def("state_precisions", [] { return mpe_torch::names(mpe_torch::StatePrecisions{}); });
  m.def("optimizers", [] { return mpe_torch::names(mpe_torch::Optimizers{}); });
  m.def("export_formats", [] { return mpe_torch::names(mpe_torch::ExportFormats{}); });
  m.def("default_eps", &mpe_torch::default_eps, py::arg("optimizer"));
  // module_local: the CPU and the CUDA module each register their own mpe_torch::Tbe.
  py::class_<Tbe>(m, "Tbe", py::module_local())
#ifdef MPE_TORCH_CUDA
      .def(py::init<const std::vector<std::pair<int64_t, int64_t>>&, const std::string&, const std::string&,
                    double, const std::string&, const std::string&, const std::string&, const std::string&,
                    double, double, double, double, uint64_t, const std::string&, bool, bool,
                    const std::vector<int64_t>&, const std::vector<int64_t>&, double, int64_t,
                    const std::string&>(),
           py::arg("specs"), py::arg("storage"), py::arg("cache"), py::arg("cache_fraction"),
           py::arg("rounding"), py::arg("state_precision"), py::arg("pooling"), py::arg("optimizer"),
           py::arg("learning_rate"), py::arg("eps"), py::arg("beta1"), py::arg("beta2"), py::arg("seed"),
           py::arg("non_finite"), py::arg("slot_index"), py::arg("defer_admission"), py::arg("row_keys"),
           py::arg("column_keys"), py::arg("max_range_growth"), py::arg("device_index"),
           py::arg("store_placement"))
#else
      .def(py::init<const std::vector<std::pair<int64_t, int64_t>>&, const std::string&, const std::string&,
                    double, const std::string&, const std::string&, const std::string&, const std::string&,
                    double, double, double, double, uint64_t, const std::string&, bool, bool,
                    const std::vector<int64_t>&, const std::vector<int64_t>&, double>(),
           py::arg("specs"), py::arg("storage"), py::arg("cache"), py::arg("cache_fraction"),
           py::arg("rounding"), py::arg("state_precision"), py::arg("pooling"), py::arg("optimizer"),
           py::arg("learning_rate"), py::arg("eps"), py::arg("beta1"), py::arg("beta2"), py::arg("seed"),
           py::arg("non_finite"), py::arg("slot_index"), py::arg("defer_admission"), py::arg("row_keys"),
           py::arg("column_keys"), py::arg("max_range_growth"))
#endif
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
      .def("load_state", &Tbe::load_state, py::arg("state"))
      .def("export_table", &Tbe::export_table, py::arg("table"), py::arg("layout"), py::arg("alignment"),
           py::arg("scale_bias_last"), py::arg("format"))
      .def("import_table", &Tbe::import_table, py::arg("table"), py::arg("data"), py::arg("layout"),
           py::arg("alignment"), py::arg("scale_bias_last"))
      .def("get_weights", &Tbe::get_weights, py::arg("table"))
      .def("set_weights", &Tbe::set_weights, py::arg("table"), py::arg("weights"))
      .def("copy_rows", &Tbe::copy_rows, py::arg("table"), py::arg("src_rows"), py::arg("dst_rows"))
      .def("init_uniform", &Tbe::init_uniform, py::arg("low"), py::arg("high"))
      .def("init_uniform_tables", &Tbe::init_uniform_tables, py::arg("low"), py::arg("high"))
      .def("flush", &Tbe::flush)
      .def("stats", &Tbe::stats)
      .def("reset_stats", &Tbe::reset_stats)
      .def("memory", &Tbe::memory)
      .def("groups", &Tbe::groups);
}
