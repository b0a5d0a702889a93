// SPDX-License-Identifier: Apache-2.0
/// @file embedding_bag.hpp
/// @brief Test-only reference: a plain FP32 table-batched embedding bag with SGD and
/// FBGEMM's exact row-wise Adagrad, written from DESIGN.md's formulas with ordinary
/// loops and no mpe code (besides the public Pooling enum), plus random batch helpers.
///
/// Orders follow DESIGN.md's numerics contract, so results can be compared bit for bit:
///   - pooling: acc = +0.0f, then acc = acc + x (or acc + w * x) for each index in order;
///     mean multiplies by (1.0f / L); an empty bag gives zeros;
///   - a row's gradient is the sum of its occurrences' terms c * grad_output in position
///     order, starting from the first term (c = per-sample weight, 1.0f / L or 1);
///   - SGD: w = w - lr * g;
///   - row-wise Adagrad: G += (pairwise sum over d of g_d * g_d) / D;
///     m = lr / (sqrt(G) + eps); w = w - m * g. The pairwise order is the one DESIGN.md
///     fixes for reductions across D (blocks of 8 left to right, block sums combined like
///     a binary counter, the rest from the smallest partial to the largest).
/// Compile with contraction off (-ffp-contract=off) so each operation rounds once.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <vector>

#include "mpe/core/types.hpp"

namespace ref {

/// One table-batched call: CSR indices/offsets (table-major) and optional per-sample weights.
struct Batch {
  std::vector<std::int64_t> indices;
  std::vector<std::int64_t> offsets;  // T*B + 1
  std::vector<float> weights;         // empty or indices.size()
  std::int64_t B = 0;
};

/// The fixed pairwise order, written independently of mpe's num::pairwise_sum.
inline float pairwise_sum(const std::vector<float>& terms) {
  std::vector<std::pair<float, int>> stack;  // (partial sum, level)
  std::size_t i = 0;
  while (i < terms.size()) {
    const std::size_t end = std::min(terms.size(), i + 8);
    float s = terms[i];
    for (std::size_t j = i + 1; j < end; ++j) s = s + terms[j];
    i = end;
    int level = 0;
    while (!stack.empty() && stack.back().second == level) {
      s = stack.back().first + s;
      stack.pop_back();
      ++level;
    }
    stack.emplace_back(s, level);
  }
  if (stack.empty()) return 0.0f;
  float s = stack.back().first;
  for (int k = static_cast<int>(stack.size()) - 2; k >= 0; --k)
    s = stack[static_cast<std::size_t>(k)].first + s;
  return s;
}

/// Plain FP32 embedding bag over T tables of one dim D; weights (total rows, D).
class EmbeddingBag {
 public:
  EmbeddingBag(std::vector<std::int64_t> table_rows, int dim) : rows_(std::move(table_rows)), D_(dim) {
    first_.push_back(0);
    for (auto r : rows_) first_.push_back(first_.back() + r);
    w_.assign(static_cast<std::size_t>(first_.back()) * D_, 0.0f);
  }
  std::int64_t T() const { return static_cast<std::int64_t>(rows_.size()); }
  int D() const { return D_; }
  std::int64_t total_rows() const { return first_.back(); }
  std::int64_t first_row(std::int64_t t) const { return first_[static_cast<std::size_t>(t)]; }
  std::vector<float>& weights() { return w_; }
  const std::vector<float>& weights() const { return w_; }
  const std::vector<float>& adagrad_state() const { return G_; }

  /// Output (B, T*D) of one batch.
  std::vector<float> forward(const Batch& b, mpe::Pooling pooling) const {
    std::vector<float> out(static_cast<std::size_t>(b.B * T() * D_), 0.0f);
    for (std::int64_t t = 0; t < T(); ++t) {
      for (std::int64_t s = 0; s < b.B; ++s) {
        const std::int64_t j = t * b.B + s;
        float* o = &out[static_cast<std::size_t>((s * T() + t) * D_)];
        const auto begin = b.offsets[static_cast<std::size_t>(j)],
                   end = b.offsets[static_cast<std::size_t>(j + 1)];
        for (int d = 0; d < D_; ++d) {
          float acc = 0.0f;
          for (auto i = begin; i < end; ++i) {
            const float x = row(t, b.indices[static_cast<std::size_t>(i)])[d];
            acc = b.weights.empty() ? acc + x : acc + b.weights[static_cast<std::size_t>(i)] * x;
          }
          if (pooling == mpe::Pooling::Mean && end > begin)
            acc = acc * (1.0f / static_cast<float>(end - begin));
          o[d] = acc;
        }
      }
    }
    return out;
  }

  /// Summed gradient per global row (occurrences in position order).
  std::map<std::int64_t, std::vector<float>> row_gradients(const Batch& b, mpe::Pooling pooling,
                                                           const std::vector<float>& grad_output) const {
    std::map<std::int64_t, std::vector<float>> g;
    // Positions in order: occurrence i belongs to bag j with offsets[j] <= i < offsets[j+1].
    const std::int64_t nb = T() * b.B;
    for (std::int64_t j = 0; j < nb; ++j) {
      const auto begin = b.offsets[static_cast<std::size_t>(j)],
                 end = b.offsets[static_cast<std::size_t>(j + 1)];
      const std::int64_t t = j / b.B, s = j % b.B;
      const float* go = &grad_output[static_cast<std::size_t>((s * T() + t) * D_)];
      for (auto i = begin; i < end; ++i) {
        float c = 1.0f;
        if (!b.weights.empty()) {
          c = b.weights[static_cast<std::size_t>(i)];
        } else if (pooling == mpe::Pooling::Mean) {
          c = 1.0f / static_cast<float>(end - begin);
        }
        const std::int64_t r = first_row(t) + b.indices[static_cast<std::size_t>(i)];
        auto it = g.find(r);
        if (it == g.end()) {
          std::vector<float> v(static_cast<std::size_t>(D_));
          for (int d = 0; d < D_; ++d) v[static_cast<std::size_t>(d)] = c * go[d];
          g.emplace(r, std::move(v));
        } else {
          for (int d = 0; d < D_; ++d)
            it->second[static_cast<std::size_t>(d)] = it->second[static_cast<std::size_t>(d)] + c * go[d];
        }
      }
    }
    return g;
  }

  void sgd(const Batch& b, mpe::Pooling pooling, const std::vector<float>& grad_output, float lr) {
    for (const auto& [r, g] : row_gradients(b, pooling, grad_output)) {
      float* w = &w_[static_cast<std::size_t>(r * D_)];
      for (int d = 0; d < D_; ++d) w[d] = w[d] - lr * g[static_cast<std::size_t>(d)];
    }
  }

  void adagrad(const Batch& b, mpe::Pooling pooling, const std::vector<float>& grad_output, float lr,
               float eps) {
    if (G_.empty()) G_.assign(static_cast<std::size_t>(total_rows()), 0.0f);
    for (const auto& [r, g] : row_gradients(b, pooling, grad_output)) {
      std::vector<float> sq(g.size());
      for (std::size_t d = 0; d < g.size(); ++d) sq[d] = g[d] * g[d];
      float& G = G_[static_cast<std::size_t>(r)];
      G = G + pairwise_sum(sq) / static_cast<float>(D_);
      const float m = lr / (std::sqrt(G) + eps);
      float* w = &w_[static_cast<std::size_t>(r * D_)];
      for (int d = 0; d < D_; ++d) w[d] = w[d] - m * g[static_cast<std::size_t>(d)];
    }
  }

  /// Element-wise Adagrad (torch.optim.Adagrad, no decay): G_d += g_d^2;
  /// w_d -= lr * g_d / (sqrt(G_d) + eps).
  void adagrad_elementwise(const Batch& b, mpe::Pooling pooling, const std::vector<float>& grad_output,
                           float lr, float eps) {
    if (G_.empty()) G_.assign(static_cast<std::size_t>(total_rows() * D_), 0.0f);
    for (const auto& [r, g] : row_gradients(b, pooling, grad_output)) {
      float* w = &w_[static_cast<std::size_t>(r * D_)];
      float* G = &G_[static_cast<std::size_t>(r * D_)];
      for (int d = 0; d < D_; ++d) {
        const float gd = g[static_cast<std::size_t>(d)];
        G[d] = G[d] + gd * gd;
        w[d] = w[d] - (lr * gd) / (std::sqrt(G[d]) + eps);
      }
    }
  }

  /// Adam with bias correction (torch.optim.Adam, no weight decay, no AMSGrad), step t
  /// counted per call from 1; beta^t by binary exponentiation (the documented rule).
  void adam(const Batch& b, mpe::Pooling pooling, const std::vector<float>& grad_output, float lr,
            float beta1, float beta2, float eps) {
    if (M_.empty()) {
      M_.assign(static_cast<std::size_t>(total_rows() * D_), 0.0f);
      V_.assign(M_.size(), 0.0f);
    }
    ++t_;
    auto power = [](float x, std::uint64_t n) {
      float r = 1.0f;
      for (; n > 0; n >>= 1, x = x * x) {
        if (n & 1u) r = r * x;
      }
      return r;
    };
    const float c1 = 1.0f - power(beta1, t_), c2 = 1.0f - power(beta2, t_);
    for (const auto& [r, g] : row_gradients(b, pooling, grad_output)) {
      float* w = &w_[static_cast<std::size_t>(r * D_)];
      for (int d = 0; d < D_; ++d) {
        const float gd = g[static_cast<std::size_t>(d)];
        float& m = M_[static_cast<std::size_t>(r * D_ + d)];
        float& v = V_[static_cast<std::size_t>(r * D_ + d)];
        m = beta1 * m + (1.0f - beta1) * gd;
        v = beta2 * v + (1.0f - beta2) * (gd * gd);
        w[d] = w[d] - (lr * (m / c1)) / (std::sqrt(v / c2) + eps);
      }
    }
  }

 private:
  const float* row(std::int64_t t, std::int64_t local) const {
    if (local < 0 || local >= rows_[static_cast<std::size_t>(t)]) throw std::out_of_range("ref: index");
    return &w_[static_cast<std::size_t>((first_row(t) + local) * D_)];
  }
  std::vector<std::int64_t> rows_;
  int D_;
  std::vector<std::int64_t> first_;
  std::vector<float> w_;
  std::vector<float> G_, M_, V_;
  std::uint64_t t_ = 0;
};

/// A random batch: bag lengths 0..max_len (empty bags included), indices skewed towards
/// small ids (so rows repeat within and across batches), duplicates allowed.
inline Batch random_batch(std::mt19937_64& rng, const std::vector<std::int64_t>& table_rows, std::int64_t B,
                          int max_len, bool weighted) {
  Batch b;
  b.B = B;
  b.offsets.push_back(0);
  std::uniform_int_distribution<int> len(0, max_len);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  std::uniform_real_distribution<float> wdist(-1.5f, 1.5f);
  for (std::size_t t = 0; t < table_rows.size(); ++t) {
    for (std::int64_t s = 0; s < B; ++s) {
      const int L = len(rng);
      for (int k = 0; k < L; ++k) {
        const float x = u01(rng);
        auto idx = static_cast<std::int64_t>(x * x * static_cast<float>(table_rows[t]));
        if (idx >= table_rows[t]) idx = table_rows[t] - 1;
        b.indices.push_back(idx);
        if (weighted) b.weights.push_back(wdist(rng));
      }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
  }
  return b;
}

/// Uniform floats in [lo, hi).
inline std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

/// Bitwise equality of two float arrays (distinguishes -0 from +0 and NaN payloads).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Index of the first element whose bits differ, or -1.
inline std::int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<std::int64_t>(i);
  }
  return -1;
}

/// Table t's share of a table-major batch (its bags, indices and weights), as a one-table batch.
inline Batch table_batch(const Batch& b, std::int64_t t) {
  Batch o;
  o.B = b.B;
  const auto first = b.offsets[static_cast<std::size_t>(t * b.B)];
  o.offsets.push_back(0);
  for (std::int64_t i = 0; i < b.B; ++i) {
    const auto lo = b.offsets[static_cast<std::size_t>(t * b.B + i)],
               hi = b.offsets[static_cast<std::size_t>(t * b.B + i + 1)];
    for (auto p = lo; p < hi; ++p) {
      o.indices.push_back(b.indices[static_cast<std::size_t>(p)]);
      if (!b.weights.empty()) o.weights.push_back(b.weights[static_cast<std::size_t>(p)]);
    }
    o.offsets.push_back(hi - first);
  }
  return o;
}

}  // namespace ref
