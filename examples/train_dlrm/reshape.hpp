// The "@md<d>" / "@h<k>" configs of train_dlrm: large tables at a smaller D and/or hashed
// into fewer rows ("@t<p>": with their hot ids in rows of their own, mpe::TieredRows),
// behind the model's uniform (B, T*D) layout. Md is any type with MixedDimEmbedding's
// members used below (trainer.hpp passes one; the unit test a plain FP32 reference).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "mpe/embedding/tiered_rows.hpp"

namespace dlrm {

// Large tables reshaped behind the model's (B, T*D) layout: a MixedDimEmbedding whose table
// t has D_t <= D and R_t <= rows_t rows. Its D_t values fill the first D_t of the table's
// D-wide slot and the rest is 0 (a fixed projection [I; 0], so the dot interaction sees the
// table through its first D_t coordinates); the gradient of the padding is dropped. A
// table with R_t < rows_t takes id mod R_t (the hashing trick: colliding ids share a row).
// A tiered table (tiers[t] set: "@t<p>") maps its ids through an mpe::TieredRows instead:
// hot ids in private rows [0, P), the others hashed into the shared rows [P, P + S); a
// training forward counts the batch's ids, and each id promoted by it starts from the
// weights of the shared row it used (copied before the forward); inference only looks up.
template <class Md>
class ReshapedTables {
 public:
  ReshapedTables(Md& md, int D, std::vector<std::int64_t> hashed_rows,
                 const std::vector<std::optional<mpe::TieredRowsConfig>>& tiers = {})
      : md_(md), D_(D), hashed_(std::move(hashed_rows)) {
    for (const auto& c : tiers) tiers_.push_back(c ? std::make_unique<mpe::TieredRows>(*c) : nullptr);
    tiers_.resize(static_cast<std::size_t>(md_.num_tables()));
  }
  template <class Pooling>
  void forward(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<float> out,
               Pooling p, std::span<const float> per_sample_weights = {}) {
    buf_.resize(compact_size(out.size()));
    remap(idx, off, ids_, /*tiers_too=*/false);
    promote(idx, off);
    md_.forward(std::span<const std::int64_t>(ids_), off, std::span<float>(buf_), p, per_sample_weights);
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
  // The tables' footprint, the tiers' maps and sketches (host) counted as metadata.
  auto memory() const {
    auto m = md_.memory();
    for (const auto& t : tiers_)
      if (t) m.metadata_bytes += t->memory_bytes();
    return m;
  }
  // Table t's tier (nullptr: not tiered).
  const mpe::TieredRows* tier(std::size_t t) const { return tiers_[t].get(); }

 private:
  // A training forward's tier step: each tiered table's ids counted and mapped (ids_ holds
  // them mapped, the other tables as remap left them), then each promoted id's private row
  // set to the weights of the shared row it came from.
  void promote(std::span<const std::int64_t> idx, std::span<const std::int64_t> off) {
    const auto T = static_cast<std::size_t>(md_.num_tables());
    const std::size_t B = (off.size() - 1) / T;
    for (std::size_t t = 0; t < T; ++t) {
      if (!tiers_[t]) continue;
      const auto first = static_cast<std::size_t>(off[t * B]),
                 n = static_cast<std::size_t>(off[(t + 1) * B]) - first;
      tiers_[t]->map(idx.subspan(first, n), std::span<std::int64_t>(ids_).subspan(first, n));
      const auto ti = static_cast<std::int64_t>(t);
      tiers_[t]->copy_moved_rows(
          md_.dim(ti), 0, [&](std::span<float> out, std::int64_t r) { md_.get_weights(ti, out, r); },
          [&](std::span<const float> in, std::int64_t r) { md_.set_weights(ti, in, r); });
    }
  }

  // ids = idx with each hashed table's ids hashed and, with tiers_too, each tiered table's
  // looked up in its tier (a training forward leaves those to promote(), which counts them).
  std::span<const std::int64_t> remap(std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                                      std::vector<std::int64_t>& ids, bool tiers_too = true) const {
    ids.assign(idx.begin(), idx.end());
    const auto T = static_cast<std::size_t>(md_.num_tables());
    const std::size_t B = (off.size() - 1) / T;
    for (std::size_t t = 0; t < T; ++t) {
      const std::int64_t R = hashed_[t];
      const auto first = static_cast<std::size_t>(off[t * B]),
                 n = static_cast<std::size_t>(off[(t + 1) * B]) - first;
      if (tiers_[t]) {
        if (tiers_too)
          tiers_[t]->lookup(idx.subspan(first, n), std::span<std::int64_t>(ids).subspan(first, n));
      } else if (R > 0)
        for (std::size_t i = first; i < first + n; ++i) ids[i] %= R;
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
  std::vector<std::int64_t> hashed_;                     // per table: rows after hashing, 0 = not hashed
  std::vector<std::unique_ptr<mpe::TieredRows>> tiers_;  // per table: its tier, or null
  std::vector<float> buf_, gbuf_;
  std::vector<std::int64_t> ids_;
};

}  // namespace dlrm
