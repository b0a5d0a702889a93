// The "@md<d>" / "@h<k>" configs of train_dlrm: large tables at a smaller D and/or hashed
// into fewer rows, behind the model's uniform (B, T*D) layout. No library include: Md is
// any type with MixedDimEmbedding's members used below (trainer.hpp passes one; the unit
// test a plain FP32 reference).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace dlrm {

// Large tables reshaped behind the model's (B, T*D) layout: a MixedDimEmbedding whose table
// t has D_t <= D and R_t <= rows_t rows. Its D_t values fill the first D_t of the table's
// D-wide slot and the rest is 0 (a fixed projection [I; 0], so the dot interaction sees the
// table through its first D_t coordinates); the gradient of the padding is dropped. A
// table with R_t < rows_t takes id mod R_t (the hashing trick: colliding ids share a row).
template <class Md>
class ReshapedTables {
 public:
  ReshapedTables(Md& md, int D, std::vector<std::int64_t> hashed_rows)
      : md_(md), D_(D), hashed_(std::move(hashed_rows)) {}
  template <class Pooling>
  void forward(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<float> out,
               Pooling p, std::span<const float> per_sample_weights = {}) {
    buf_.resize(compact_size(out.size()));
    md_.forward(remap(idx, off, ids_), off, std::span<float>(buf_), p, per_sample_weights);
    expand(buf_, out);
  }
  template <class Pooling>
  void forward_inference(std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                         std::span<float> out, Pooling p,
                         std::span<const float> per_sample_weights = {}) const {
    std::vector<float> b(compact_size(out.size()));
    std::vector<std::int64_t> ids;
    md_.forward_inference(remap(idx, off, ids), off, std::span<float>(b), p, per_sample_weights);
    expand(b, out);
  }
  template <class Opt>
  void backward(std::span<const float> g, const Opt& opt) {
    gbuf_.resize(compact_size(g.size()));
    const std::int64_t T = md_.num_tables(), W = md_.total_dim();
    const std::size_t B = g.size() / static_cast<std::size_t>(T * D_);
    for (std::size_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        std::copy_n(g.data() + (b * T + t) * D_, md_.dim(t), gbuf_.data() + b * W + md_.column(t));
    md_.backward(std::span<const float>(gbuf_), opt);
  }
  auto stats() const { return md_.stats(); }
  void reset_stats() { md_.reset_stats(); }
  auto memory() const { return md_.memory(); }

 private:
  std::span<const std::int64_t> remap(std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                                      std::vector<std::int64_t>& ids) const {
    ids.assign(idx.begin(), idx.end());
    const auto T = static_cast<std::size_t>(md_.num_tables());
    const std::size_t B = (off.size() - 1) / T;
    for (std::size_t t = 0; t < T; ++t) {
      const std::int64_t R = hashed_[t];
      if (R == 0) continue;
      for (auto i = off[t * B]; i < off[(t + 1) * B]; ++i) ids[static_cast<std::size_t>(i)] %= R;
    }
    return ids;
  }
  std::size_t compact_size(std::size_t padded) const {
    return padded / static_cast<std::size_t>(md_.num_tables() * D_) *
           static_cast<std::size_t>(md_.total_dim());
  }
  void expand(const std::vector<float>& c, std::span<float> out) const {
    const std::int64_t T = md_.num_tables(), W = md_.total_dim();
    const std::size_t B = out.size() / static_cast<std::size_t>(T * D_);
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        std::copy_n(c.data() + b * W + md_.column(t), md_.dim(t), out.data() + (b * T + t) * D_);
  }
  Md& md_;
  int D_;
  std::vector<std::int64_t> hashed_;  // per table: rows after hashing, 0 = not hashed
  std::vector<float> buf_, gbuf_;
  std::vector<std::int64_t> ids_;
};

}  // namespace dlrm
