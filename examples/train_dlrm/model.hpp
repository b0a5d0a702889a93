// The dense part of a small DLRM, forward and backward written with Eigen:
//   bottom MLP (13 -> 64 -> D, ReLU everywhere, as in DLRM)
//   pairwise dot-product interaction of {bottom output, T pooled embeddings}
//     (strict upper triangle), concatenated with the bottom output
//   top MLP (D + (T+1)T/2 -> 64 -> 1, ReLU hidden, linear output = logit)
//   sigmoid + binary cross-entropy (mean over the batch)
// Embedding vectors come in, and their gradients go out, in the library's
// (B, T*D) row-major layout, which is a column-major (T*D, B) matrix.
// Templated on the scalar so the gradient check can run in double.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "hash.hpp"

namespace dlrm {

template <class S>
using MatT = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using VecT = Eigen::Matrix<S, Eigen::Dynamic, 1>;

template <class S>
struct Linear {  // y = W x + b
  MatT<S> W, dW;
  VecT<S> b, db;
  // DLRM's initialisation: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out).
  Linear(int in, int out, Rng& rng) : W(out, in), dW(MatT<S>::Zero(out, in)), b(out), db(VecT<S>::Zero(out)) {
    const double sw = std::sqrt(2.0 / (in + out)), sb = std::sqrt(1.0 / out);
    for (int j = 0; j < in; ++j)
      for (int i = 0; i < out; ++i) W(i, j) = static_cast<S>(sw * rng.normal());
    for (int i = 0; i < out; ++i) b(i) = static_cast<S>(sb * rng.normal());
  }
};

template <class S>
class Mlp {
 public:
  // sizes = {in, h1, ..., out}; ReLU after every layer, or all but the last.
  Mlp(const std::vector<int>& sizes, bool relu_last, Rng& rng) : relu_last_(relu_last) {
    if (sizes.size() < 2) throw std::invalid_argument("Mlp: need at least input and output size");
    for (std::size_t l = 0; l + 1 < sizes.size(); ++l) layers.emplace_back(sizes[l], sizes[l + 1], rng);
  }

  const MatT<S>& forward(const MatT<S>& x) {
    acts_.resize(layers.size() + 1);
    acts_[0] = x;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      acts_[l + 1].noalias() = layers[l].W * acts_[l];
      acts_[l + 1].colwise() += layers[l].b;
      if (relu(l)) acts_[l + 1] = acts_[l + 1].cwiseMax(S(0));
    }
    return acts_.back();
  }

  MatT<S> infer(const MatT<S>& x) const {
    MatT<S> a = x;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      MatT<S> z = layers[l].W * a;
      z.colwise() += layers[l].b;
      a = relu(l) ? MatT<S>(z.cwiseMax(S(0))) : z;
    }
    return a;
  }

  // dy: gradient of the loss w.r.t. the last forward's output. Sets dW/db and
  // returns the gradient w.r.t. the input.
  MatT<S> backward(const MatT<S>& dy) {
    MatT<S> g = dy;
    for (std::size_t l = layers.size(); l-- > 0;) {
      if (relu(l)) g = (acts_[l + 1].array() > S(0)).select(g, S(0));
      layers[l].dW.noalias() = g * acts_[l].transpose();
      layers[l].db = g.rowwise().sum();
      if (l > 0) {
        MatT<S> gin = layers[l].W.transpose() * g;
        g.swap(gin);
      } else {
        return layers[l].W.transpose() * g;
      }
    }
    return g;
  }

  void sgd(S lr) {
    for (auto& L : layers) {
      L.W -= lr * L.dW;
      L.b -= lr * L.db;
    }
  }

  int out_dim() const { return static_cast<int>(layers.back().W.rows()); }
  std::vector<Linear<S>> layers;

 private:
  bool relu(std::size_t l) const { return relu_last_ || l + 1 < layers.size(); }
  bool relu_last_;
  std::vector<MatT<S>> acts_;
};

// out(:, b) = [z_b ; <v_i, v_j> for 0 <= i < j <= T], v_0 = z_b, v_t = table t-1's vector.
template <class S>
struct Interaction {
  int D = 0, T = 0;
  int pairs() const { return (T + 1) * T / 2; }
  int out_dim() const { return D + pairs(); }

  void forward(const MatT<S>& z, const S* emb, MatT<S>& out) const {
    const int B = static_cast<int>(z.cols());
    out.resize(out_dim(), B);
    out.topRows(D) = z;
    if (T == 0) return;
#pragma omp parallel
    {
      MatT<S> V(D, T + 1), G(T + 1, T + 1);
#pragma omp for schedule(static)
      for (int b = 0; b < B; ++b) {
        V.col(0) = z.col(b);
        V.rightCols(T) = Eigen::Map<const MatT<S>>(emb + static_cast<std::size_t>(b) * T * D, D, T);
        G.noalias() = V.transpose() * V;
        int p = D;
        for (int i = 0; i <= T; ++i)
          for (int j = i + 1; j <= T; ++j) out(p++, b) = G(i, j);
      }
    }
  }

  // dout: gradient w.r.t. forward's out. Writes dz (D, B) and demb (B*T*D).
  void backward(const MatT<S>& z, const S* emb, const MatT<S>& dout, MatT<S>& dz, S* demb) const {
    const int B = static_cast<int>(z.cols());
    dz = dout.topRows(D);
    if (T == 0) return;
#pragma omp parallel
    {
      MatT<S> V(D, T + 1), Sg(T + 1, T + 1), dV(D, T + 1);
#pragma omp for schedule(static)
      for (int b = 0; b < B; ++b) {
        V.col(0) = z.col(b);
        V.rightCols(T) = Eigen::Map<const MatT<S>>(emb + static_cast<std::size_t>(b) * T * D, D, T);
        Sg.setZero();
        int p = D;
        for (int i = 0; i <= T; ++i)
          for (int j = i + 1; j <= T; ++j) {
            Sg(i, j) = dout(p, b);
            Sg(j, i) = dout(p, b);
            ++p;
          }
        dV.noalias() = V * Sg;  // d<v_i,v_j>/dv_i = v_j, symmetric
        dz.col(b) += dV.col(0);
        Eigen::Map<MatT<S>>(demb + static_cast<std::size_t>(b) * T * D, D, T) = dV.rightCols(T);
      }
    }
  }
};

struct DlrmShape {
  int dense_in = 13;
  int dim = 16;
  int tables = 26;  // 0 = dense-only baseline (no interaction pairs)
  std::vector<int> bottom_hidden{64};
  std::vector<int> top_hidden{64};
};

template <class S>
class DlrmT {
 public:
  DlrmT(const DlrmShape& shape, std::uint64_t seed) : DlrmT(shape, Rng(hash_combine(seed, 0xd1e5e))) {}

  // Training forward; caches what backward needs. Returns logits (1, B).
  const MatT<S>& forward(const MatT<S>& dense, const S* emb) {
    emb_ = emb;
    z_ = bottom.forward(dense);
    inter.forward(z_, emb, x_);
    return top.forward(x_);
  }
  // dlogit (1, B) -> parameter gradients, and demb (B*T*D) if tables > 0.
  void backward(const MatT<S>& dlogit, S* demb) {
    const MatT<S> dx = top.backward(dlogit);
    MatT<S> dz;
    inter.backward(z_, emb_, dx, dz, demb);
    bottom.backward(dz);
  }
  void sgd(S lr) {
    bottom.sgd(lr);
    top.sgd(lr);
  }
  MatT<S> infer(const MatT<S>& dense, const S* emb) const {
    MatT<S> x;
    inter.forward(bottom.infer(dense), emb, x);
    return top.infer(x);
  }

  Mlp<S> bottom, top;
  Interaction<S> inter;

 private:
  static std::vector<int> sizes(int in, const std::vector<int>& hidden, int out) {
    std::vector<int> s{in};
    s.insert(s.end(), hidden.begin(), hidden.end());
    s.push_back(out);
    return s;
  }
  DlrmT(const DlrmShape& sh, Rng rng)
      : bottom(sizes(sh.dense_in, sh.bottom_hidden, sh.dim), true, rng),
        top(sizes(sh.dim + (sh.tables + 1) * sh.tables / 2, sh.top_hidden, 1), false, rng),
        inter{sh.dim, sh.tables} {}
  const S* emb_ = nullptr;
  MatT<S> z_, x_;
};

using Dlrm = DlrmT<float>;

// Mean binary cross-entropy of sigmoid(logit); fills dlogit = (sigmoid - y) / B.
template <class S>
double bce_with_logits(const MatT<S>& logit, const float* y, MatT<S>& dlogit) {
  const auto B = logit.cols();
  dlogit.resize(1, B);
  double loss = 0;
  for (Eigen::Index b = 0; b < B; ++b) {
    const double x = static_cast<double>(logit(0, b));
    // softplus(x) - y x, computed stably
    loss += (x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))) - y[b] * x;
    const double p = 1.0 / (1.0 + std::exp(-x));
    dlogit(0, b) = static_cast<S>((p - y[b]) / static_cast<double>(B));
  }
  return loss / static_cast<double>(B);
}

}  // namespace dlrm
