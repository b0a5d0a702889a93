// SPDX-License-Identifier: Apache-2.0
// mpe_torch: GroupImpl<Storage, Cache, Rounding>, the Group over one CachedEmbedding
// instantiation. Included by the group_<storage>.cpp translation units only.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <mpe/io/fbgemm.hpp>
#include <mpe/mpe.hpp>

#include "group.hpp"

namespace mpe_torch {

template <class S, class C, class R>
class GroupImpl final : public Group {
 public:
  using Emb = mpe::CachedEmbedding<S, C, R>;

  explicit GroupImpl(const mpe::EmbeddingConfig& cfg) : emb_(cfg) {}

  void forward(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets, std::span<float> out,
               mpe::Pooling pooling, std::span<const float> psw) override {
    emb_.forward(indices, offsets, out, pooling, psw);
  }
  void forward_inference(std::span<const std::int64_t> indices, std::span<const std::int64_t> offsets,
                         std::span<float> out, mpe::Pooling pooling, std::span<const float> psw) const override {
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
  void save(const std::filesystem::path& path) const override { emb_.save(path); }
  void load(const std::filesystem::path& path) override { emb_.load(path); }
  std::unique_ptr<Group> fresh() const override { return std::make_unique<GroupImpl>(emb_.config()); }
  void swap(Group& other) override {
    auto* o = dynamic_cast<GroupImpl*>(&other);
    if (o == nullptr) throw std::logic_error("mpe_torch: swap between groups of different types");
    std::swap(emb_, o->emb_);
  }

  std::size_t export_row_bytes(const LayoutSpec& l, Target target) const override {
    switch (target) {
      case Target::Same: return row_bytes_as<S>(l);
      case Target::Fp32: return row_bytes_as<mpe::Fp32>(l);
      case Target::Fp16: return row_bytes_as<mpe::Fp16>(l);
      case Target::Int8: return row_bytes_as<mpe::Int8Rowwise>(l);
      case Target::Int4: return row_bytes_as<mpe::Int4Rowwise>(l);
    }
    throw std::invalid_argument("mpe_torch: unknown export format");
  }
  std::vector<std::uint8_t> export_table(std::int64_t table, const LayoutSpec& l, Target target) override {
    switch (target) {
      case Target::Same: return export_as<void>(table, l);
      case Target::Fp32: return export_as<mpe::Fp32>(table, l);
      case Target::Fp16: return export_as<mpe::Fp16>(table, l);
      case Target::Int8: return export_as<mpe::Int8Rowwise>(table, l);
      case Target::Int4: return export_as<mpe::Int4Rowwise>(table, l);
    }
    throw std::invalid_argument("mpe_torch: unknown export format");
  }
  std::int64_t import_table(std::int64_t table, const LayoutSpec& l, std::span<const std::uint8_t> bytes) override {
    if (l.layout == Layout::Fused) return mpe::io::import_table(emb_, table, mpe::interop::FbgemmFused{l.alignment}, bytes);
    return mpe::io::import_table(emb_, table, mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, bytes);
  }

  void get_weights(std::span<float> out, std::int64_t first_row) const override { emb_.get_weights(out, first_row); }
  void set_weights(std::span<const float> w, std::int64_t first_row) override { emb_.set_weights(w, first_row); }
  void init_uniform(float low, float high) override { emb_.init_uniform(low, high); }
  void flush() override { emb_.flush(); }
  mpe::CacheStats stats() const override { return emb_.stats(); }
  void reset_stats() override { emb_.reset_stats(); }
  mpe::MemoryFootprint memory() const override { return emb_.memory(); }
  std::uint64_t step() const override { return emb_.step(); }
  std::int64_t cache_slots() const override { return emb_.cache_slots(); }
  std::int64_t table_offset(std::int64_t t) const override { return emb_.table_offset(t); }
  const mpe::EmbeddingConfig& config() const override { return emb_.config(); }
  std::string type_name() const override {
    return std::string(S::name) + "/" + C::name + "/" + R::name;
  }

 private:
  template <class T>
  std::size_t row_bytes_as(const LayoutSpec& l) const {
    const std::int32_t D = emb_.dim();
    if (l.layout == Layout::Fused) return mpe::interop::external_row_bytes<T>(mpe::interop::FbgemmFused{l.alignment}, D);
    return mpe::interop::external_row_bytes<T>(mpe::interop::TbeInference{l.alignment, l.scale_bias_last}, D);
  }
  template <class T>
  std::vector<std::uint8_t> export_as(std::int64_t table, const LayoutSpec& l) {
    if (l.layout == Layout::Fused)
      return mpe::io::export_table<T>(emb_, table, mpe::interop::FbgemmFused{l.alignment});
    return mpe::io::export_table<T>(emb_, table, mpe::interop::TbeInference{l.alignment, l.scale_bias_last});
  }

  Emb emb_;
};

/// The factory of one storage format: the caches and roundings built for it.
template <class S>
std::unique_ptr<Group> make_group_for(const PolicyNames& n, const mpe::EmbeddingConfig& cfg) {
  if (n.cache != "lru" && n.cache != "none") return nullptr;  // none: Lru<32> with cache_rows = 0
  if (n.rounding == "stochastic") return std::make_unique<GroupImpl<S, mpe::Lru<32>, mpe::StochasticRounding>>(cfg);
  if (n.rounding == "nearest") return std::make_unique<GroupImpl<S, mpe::Lru<32>, mpe::NearestRounding>>(cfg);
  return nullptr;
}

}  // namespace mpe_torch
