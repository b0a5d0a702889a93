// SPDX-License-Identifier: Apache-2.0
// mpe_torch: GroupImpl<Storage, Cache, Rounding>, the Group over one MixedDimEmbedding
// instantiation. Included by the group_<storage>.cpp translation units only.
#pragma once

#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "group.hpp"

namespace mpe_torch {

template <class S, class C, class R>
class GroupImpl final : public Group {
 public:
  using Emb = mpe::MixedDimEmbedding<S, C, R>;

  explicit GroupImpl(const mpe::MixedDimConfig& cfg) : emb_(cfg) {}

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
    switch (o.kind) {
      case OptKind::Sgd:
        emb_.backward(grad_output, mpe::Sgd{o.learning_rate});
        return;
      case OptKind::RowwiseAdagrad:
        emb_.backward(grad_output, mpe::RowwiseAdagrad{o.learning_rate, o.eps});
        return;
      case OptKind::Adagrad:
        emb_.backward(grad_output, mpe::Adagrad{o.learning_rate, o.eps});
        return;
      case OptKind::Adam:
        emb_.backward(grad_output, mpe::Adam{o.learning_rate, o.beta1, o.beta2, o.eps});
        return;
    }
    throw std::invalid_argument("mpe_torch: unknown optimizer kind");
  }
  std::vector<std::uint8_t> save_bytes() const override { return emb_.save_bytes(); }
  void load_bytes(std::span<const std::uint8_t> bytes) override { emb_.load_bytes(bytes, "state_dict"); }

  std::size_t export_row_bytes(std::int64_t table, const LayoutSpec& l, Target target) const override {
    const std::int32_t D = emb_.dim(table);
    switch (target) {
      case Target::Same:
        return row_bytes_as<S>(l, D);
      case Target::Fp32:
        return row_bytes_as<mpe::Fp32>(l, D);
      case Target::Fp16:
        return row_bytes_as<mpe::Fp16>(l, D);
      case Target::Int8:
        return row_bytes_as<mpe::Int8Rowwise>(l, D);
      case Target::Int4:
        return row_bytes_as<mpe::Int4Rowwise>(l, D);
    }
    throw std::invalid_argument("mpe_torch: unknown export format");
  }
  std::vector<std::uint8_t> export_table(std::int64_t table, const LayoutSpec& l, Target target) override {
    switch (target) {
      case Target::Same:
        return export_as<void>(table, l);
      case Target::Fp32:
        return export_as<mpe::Fp32>(table, l);
      case Target::Fp16:
        return export_as<mpe::Fp16>(table, l);
      case Target::Int8:
        return export_as<mpe::Int8Rowwise>(table, l);
      case Target::Int4:
        return export_as<mpe::Int4Rowwise>(table, l);
    }
    throw std::invalid_argument("mpe_torch: unknown export format");
  }
  std::int64_t import_table(std::int64_t table, const LayoutSpec& l,
                            std::span<const std::uint8_t> bytes) override {
    const auto [g, local] = emb_.locate(table);
    if (l.layout == Layout::Fused)
      return mpe::io::import_table(emb_.group(g), local, mpe::interop::FbgemmFused{l.alignment}, bytes);
    return mpe::io::import_table(emb_.group(g), local,
                                 mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, bytes);
  }

  void get_weights(std::int64_t table, std::span<float> out) const override { emb_.get_weights(table, out); }
  void set_weights(std::int64_t table, std::span<const float> w) override { emb_.set_weights(table, w); }
  void init_uniform(float low, float high) override { emb_.init_uniform(low, high); }
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
  std::string type_name() const override { return std::string(S::name) + "/" + C::name + "/" + R::name; }

 private:
  template <class T>
  static std::size_t row_bytes_as(const LayoutSpec& l, std::int32_t D) {
    if (l.layout == Layout::Fused)
      return mpe::interop::external_row_bytes<T>(mpe::interop::FbgemmFused{l.alignment}, D);
    return mpe::interop::external_row_bytes<T>(mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, D);
  }
  template <class T>
  std::vector<std::uint8_t> export_as(std::int64_t table, const LayoutSpec& l) {
    const auto [g, local] = emb_.locate(table);
    if (l.layout == Layout::Fused)
      return mpe::io::export_table<T>(emb_.group(g), local, mpe::interop::FbgemmFused{l.alignment});
    return mpe::io::export_table<T>(emb_.group(g), local,
                                    mpe::interop::TbeInference{l.alignment, l.scale_bias_last});
  }

  Emb emb_;
};

/// The factory of one storage format: the caches and roundings built for it.
template <class S>
std::unique_ptr<Group> make_group_for(const PolicyNames& n, const mpe::MixedDimConfig& cfg) {
  if (n.cache != "lru" && n.cache != "none") return nullptr;  // none: Lru<32> with cache_fraction = 0
  if (n.rounding == "stochastic")
    return std::make_unique<GroupImpl<S, mpe::Lru<32>, mpe::StochasticRounding>>(cfg);
  if (n.rounding == "nearest") return std::make_unique<GroupImpl<S, mpe::Lru<32>, mpe::NearestRounding>>(cfg);
  return nullptr;
}

}  // namespace mpe_torch
