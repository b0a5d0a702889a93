// SPDX-License-Identifier: Apache-2.0
// mpe_torch: GroupImpl<Storage, Cache, Rounding, StatePrecision, Backend>, the Group over one
// MixedDimEmbedding instantiation, and make_group_of<S, C> (HostBackend). Included by the
// group_<storage>*.cpp translation units, and through cuda_group_impl.cuh by the
// cuda_group_<storage>.cu ones (Backend = mpe::CudaBackend).
#pragma once

#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "group.hpp"

namespace mpe_torch {

/// The Group over MixedDimEmbedding<S, C, R, P, Backend>. With a device backend
/// (Backend::device_spans) the spans of forward, forward_inference and backward are device
/// memory of the backend's device, the others host memory (MixedDimEmbedding's contract), and
/// export_table / import_table throw std::logic_error: FBGEMM layouts are converted on the
/// host (mpe_torch runs them on a CPU copy of the state, see __init__.py).
template <class S, class C, class R, class P, class Backend = mpe::HostBackend>
class GroupImpl final : public Group {
 public:
  using Emb = mpe::MixedDimEmbedding<S, C, R, P, Backend>;
  static constexpr bool kHost = !Backend::device_spans;

  explicit GroupImpl(const mpe::MixedDimConfig& cfg, Backend backend = Backend{})
      : emb_(cfg, std::move(backend)) {}

  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
               std::span<float> out, mpe::Pooling pooling, std::span<const float> psw) override {
    emb_.forward(indices, offsets, out, pooling, psw);
  }
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> out, mpe::Pooling pooling,
                         std::span<const float> psw) const override {
    emb_.forward_inference(indices, offsets, out, pooling, psw);
  }
  void backward(std::span<const float> grad_output, const OptSpec& o) override {
    bool done = false;
    visit_index(Optimizers{}, o.optimizer, [&]<class O>() {
      emb_.backward(grad_output, make_optimizer<O>(o));
      done = true;
    });
    if (!done)
      throw std::invalid_argument("mpe_torch: unknown optimizer index " + std::to_string(o.optimizer));
  }
  std::vector<std::uint8_t> save_bytes() const override { return emb_.save_bytes(); }
  void load_bytes(std::span<const std::uint8_t> bytes) override { emb_.load_bytes(bytes, "state_dict"); }

  std::size_t export_row_bytes(std::int64_t table, const LayoutSpec& l, int target) const override {
    std::size_t bytes = 0;
    if constexpr (kHost)
      with_format(target, l, [&]<class T>() {
        const std::int32_t D = emb_.dim(table);
        if (l.layout == Layout::Fused) {
          if constexpr (has_fused_layout<T>)
            bytes = mpe::interop::external_row_bytes<T>(mpe::interop::FbgemmFused{l.alignment}, D);
        } else {
          if constexpr (has_tbe_layout<T>)
            bytes = mpe::interop::external_row_bytes<T>(
                mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, D);
        }
      });
    else
      host_only("export_row_bytes");
    return bytes;
  }
  std::vector<std::uint8_t> export_table(std::int64_t table, const LayoutSpec& l, int target) override {
    std::vector<std::uint8_t> out;
    if constexpr (kHost)
      with_format(target, l, [&]<class T>() {
        const auto [g, local] = emb_.locate(table);
        if (l.layout == Layout::Fused) {
          if constexpr (has_fused_layout<T>)
            out = mpe::io::export_table<T>(emb_.group(g), local, mpe::interop::FbgemmFused{l.alignment});
        } else {
          if constexpr (has_tbe_layout<T>)
            out = mpe::io::export_table<T>(emb_.group(g), local,
                                           mpe::interop::TbeInference{l.alignment, l.scale_bias_last});
        }
      });
    else
      host_only("export_table");
    return out;
  }
  std::int64_t import_table(std::int64_t table, const LayoutSpec& l,
                            std::span<const std::uint8_t> bytes) override {
    if constexpr (kHost) {
      check_layout<S>(kSameFormat, l);
      const auto [g, local] = emb_.locate(table);
      if (l.layout == Layout::Fused) {
        if constexpr (has_fused_layout<S>)
          return mpe::io::import_table(emb_.group(g), local, mpe::interop::FbgemmFused{l.alignment}, bytes);
      } else {
        if constexpr (has_tbe_layout<S>)
          return mpe::io::import_table(emb_.group(g), local,
                                       mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, bytes);
      }
    } else {
      (void)table, (void)l, (void)bytes;
      host_only("import_table");
    }
    return 0;  // not reached: check_layout or host_only threw
  }

  void get_weights(std::int64_t table, std::span<float> out, std::int64_t first_row) const override {
    emb_.get_weights(table, out, first_row);
  }
  void set_weights(std::int64_t table, std::span<const float> w, std::int64_t first_row) override {
    emb_.set_weights(table, w, first_row);
  }
  void init_uniform(float low, float high) override { emb_.init_uniform(low, high); }
  void init_uniform_tables(std::span<const float> low, std::span<const float> high) override {
    emb_.init_uniform(low, high);
  }
  void flush() override { emb_.flush(); }
  mpe::CacheStats stats() const override { return emb_.stats(); }
  void reset_stats() override { emb_.reset_stats(); }
  mpe::MemoryFootprint memory() const override { return emb_.memory(); }
  std::uint64_t step() const override { return emb_.step(); }
  std::int64_t total_dim() const override { return emb_.total_dim(); }
  std::size_t num_groups() const override { return emb_.num_groups(); }
  std::int32_t group_dim(std::size_t g) const override { return emb_.group_dim(g); }
  std::vector<std::int64_t> group_tables(std::size_t g) const override { return emb_.group_tables(g); }
  std::int64_t group_cache_slots(std::size_t g) const override { return emb_.group(g).cache_slots(); }
  std::uint64_t group_seed(std::size_t g) const override { return emb_.group(g).config().seed; }
  mpe::CacheStats group_stats(std::size_t g) const override { return emb_.group(g).stats(); }
  mpe::MemoryFootprint group_memory(std::size_t g) const override { return emb_.group(g).memory(); }
  std::string type_name() const override {
    return std::string(S::name) + "/" + C::name + "/" + R::name + "/" + P::name;
  }

 private:
  [[noreturn]] static void host_only(const char* fn) {
    throw std::logic_error(std::string("mpe_torch: ") + fn + " runs on the host backend only (backend '" +
                           Backend::name + "')");
  }
  /// Throws std::invalid_argument unless row format T (`target`: kSameFormat for the store's
  /// own) has `l`'s layout.
  template <class T>
  static void check_layout(int target, const LayoutSpec& l) {
    const bool ok = l.layout == Layout::Fused ? has_fused_layout<T> : has_tbe_layout<T>;
    if (ok) return;
    const bool same = target == kSameFormat;
    throw std::invalid_argument(
        std::string("mpe_torch: ") + (same ? "this module's storage, " : "format ") + "'" +
        std::string(py_name<T>()) + "', has no " +
        (l.layout == Layout::Fused
             ? "'fbgemm_fused' layout (FBGEMM's fused rows: fp32, fp16, bf16, int8, int4)"
             : "'tbe_inference' layout (FBGEMM's inference TBE: fp32, fp16, int8, int4)") +
        (same
             ? "; export_table converts with format= one of those; import_table reads the store's own format "
               "only"
             : ""));
  }
  /// Calls f.template operator()<T>() with T the row format of an export (`target`: the
  /// store's own, S, or ExportFormats' entry), after check_layout<T>.
  template <class F>
  static void with_format(int target, const LayoutSpec& l, F&& f) {
    auto run = [&]<class T>() {
      check_layout<T>(target, l);
      f.template operator()<T>();
    };
    if (target == kSameFormat)
      run.template operator()<S>();
    else
      visit_index(ExportFormats{}, target, run);
  }

  Emb emb_;
};

template <class S, class C>
std::unique_ptr<Group> make_group_of(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  std::unique_ptr<Group> g;
  for_each_type(Roundings{}, [&]<class R>() {
    for_each_type(StatePrecisions{}, [&]<class P>() {
      if constexpr (is_built<S, C, R, P>())
        if (!g && py_name<R>() == n.rounding && py_name<P>() == n.state_precision)
          g = std::make_unique<GroupImpl<S, C, R, P>>(cfg);
    });
  });
  return g;
}

}  // namespace mpe_torch
