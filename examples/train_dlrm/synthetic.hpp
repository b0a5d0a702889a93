// Deterministic synthetic data shaped like Criteo Kaggle.
//
// * 26 categorical fields with the Kaggle cardinalities scaled by `scale`:
//   rows_f = max(2, round(c_f * scale)).
// * Ids are Zipf(exponent) distributed over ranks 1..rows_f (exact sampler:
//   Hörmann & Derflinger's rejection-inversion), then rank -> row through a
//   keyed Feistel permutation, so hot rows are scattered over the table.
// * 13 dense features: log1p of log-normal counts, some missing (-> 0).
// * Labels ~ Bernoulli(p_true), logit = intercept + dense part (linear plus one
//   product term) + sum over fields of a hidden per-row scalar effect
//   sigma_f * N(0, 1) keyed by (seed, field, row). The intercept is calibrated
//   (bisection on 20k calibration samples) so the positive rate is ~25 %.
// Sample i is a pure function of (seed, i): the stream is reproducible and can
// be generated in parallel.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "data.hpp"
#include "hash.hpp"
#include "run.hpp"

namespace dlrm {

inline constexpr std::array<std::int64_t, kNumCat> kKaggleCardinalities = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

inline std::vector<std::int64_t> scaled_cardinalities(double scale) {
  std::vector<std::int64_t> rows(kNumCat);
  for (int f = 0; f < kNumCat; ++f)
    rows[f] = std::max<std::int64_t>(2, std::llround(static_cast<double>(kKaggleCardinalities[f]) * scale));
  return rows;
}

// Zipf over {1..n}, P(k) ~ k^-s, by rejection-inversion (Hörmann & Derflinger
// 1996, as in Apache Commons RNG). O(1) memory, < 1.1 draws per sample.
class ZipfSampler {
 public:
  ZipfSampler(std::int64_t n, double s) : n_(n), s_(s) {
    if (n < 1 || !(s > 0)) throw std::invalid_argument("ZipfSampler: need n >= 1 and s > 0");
    h_x1_ = h_integral(1.5) - 1.0;
    h_n_ = h_integral(static_cast<double>(n) + 0.5);
    s_value_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
  }
  std::int64_t operator()(Rng& rng) const {
    while (true) {
      const double u = h_n_ + rng.uniform() * (h_x1_ - h_n_);
      const double x = h_integral_inverse(u);
      std::int64_t k = static_cast<std::int64_t>(x + 0.5);
      k = std::clamp<std::int64_t>(k, 1, n_);
      if (static_cast<double>(k) - x <= s_value_ ||
          u >= h_integral(static_cast<double>(k) + 0.5) - h(static_cast<double>(k)))
        return k;
    }
  }
  std::int64_t n() const noexcept { return n_; }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  double h_integral(double x) const {
    const double lx = std::log(x);
    return helper2((1.0 - s_) * lx) * lx;
  }
  double h_integral_inverse(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;
    return std::exp(helper1(t) * x);
  }
  static double helper1(double x) {
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double helper2(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x
                              : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }
  std::int64_t n_;
  double s_, h_x1_ = 0, h_n_ = 0, s_value_ = 0;
};

// Keyed bijection of [0, n): 4-round Feistel network on 2*half bits with
// cycle walking (values >= n are re-encrypted; expected < 4 rounds trips).
class FeistelPermutation {
 public:
  FeistelPermutation(std::uint64_t n, std::uint64_t key) : n_(n), key_(key) {
    int bits = 2;
    while ((std::uint64_t{1} << bits) < n) ++bits;
    half_ = (bits + 1) / 2;
    mask_ = (std::uint64_t{1} << half_) - 1;
  }
  std::uint64_t operator()(std::uint64_t x) const {
    do x = encrypt(x);
    while (x >= n_);
    return x;
  }

 private:
  std::uint64_t encrypt(std::uint64_t x) const {
    std::uint64_t l = x >> half_, r = x & mask_;
    for (std::uint64_t round = 0; round < 4; ++round) {
      const std::uint64_t f = splitmix64(r ^ hash_combine(key_, round)) & mask_;
      const std::uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    return (l << half_) | r;
  }
  std::uint64_t n_, key_;
  int half_ = 1;
  std::uint64_t mask_ = 1;
};

struct SyntheticConfig {
  double scale = 0.01;
  double zipf_exponent = 1.05;
  double positive_rate = 0.25;
  double effect_scale = 1.0;  // multiplies every hidden per-row effect
  std::uint64_t seed = 1;
};

class SyntheticWorld {
 public:
  explicit SyntheticWorld(const SyntheticConfig& cfg) : cfg_(cfg), rows_(scaled_cardinalities(cfg.scale)) {
    Rng r(hash_combine(cfg.seed, 0x5eed));
    for (int j = 0; j < kNumDense; ++j) {
      miss_[j] = j % 4 == 3 ? 0.3 * r.uniform() : 0.02 * r.uniform();
      mu_[j] = 0.5 + 3.5 * r.uniform();
      sd_[j] = 0.4 + 1.0 * r.uniform();
      weight_[j] = 0.35 * r.normal() / sd_[j];  // each feature's logit share ~ N(0, 0.35^2)
    }
    for (int f = 0; f < kNumCat; ++f) {
      const double u = r.uniform();
      sigma_[f] = cfg.effect_scale * 0.8 * u * u;
      zipf_.emplace_back(rows_[f], cfg.zipf_exponent);
      perm_.emplace_back(static_cast<std::uint64_t>(rows_[f]), hash_combine(cfg.seed, 1000 + f));
    }
    calibrate();
  }

  const std::vector<std::int64_t>& table_rows() const noexcept { return rows_; }
  double intercept() const noexcept { return intercept_; }
  const SyntheticConfig& config() const noexcept { return cfg_; }

  double hidden_effect(int f, std::int64_t row) const {
    return sigma_[f] * keyed_normal(hash_combine(hash_combine(cfg_.seed, static_cast<std::uint64_t>(f) + 77),
                                                 static_cast<std::uint64_t>(row)));
  }

  // Sample i: dense[13], rows[t * row_stride] for t < 26, label; returns p_true.
  double sample(std::uint64_t i, float* dense, std::int64_t* rows, std::size_t row_stride,
                float& label) const {
    Rng r(hash_combine(cfg_.seed ^ 0xda7a5eedULL, i));
    const double logit = intercept_ + draw_features(r, dense, rows, row_stride);
    const double p = 1.0 / (1.0 + std::exp(-logit));
    label = r.uniform() < p ? 1.0f : 0.0f;
    return p;
  }

 private:
  // Draws features and returns the logit without intercept.
  double draw_features(Rng& r, float* dense, std::int64_t* rows, std::size_t stride) const {
    double z = 0;
    double c[kNumDense];
    for (int j = 0; j < kNumDense; ++j) {
      const bool missing = r.uniform() < miss_[j];
      const double g = r.normal();
      const double raw = missing ? 0.0 : std::floor(std::expm1(mu_[j] + sd_[j] * g));
      const float x = dense_transform(static_cast<std::int64_t>(std::max(0.0, raw)));
      dense[j] = x;
      c[j] = static_cast<double>(x) - mu_[j];
      z += weight_[j] * c[j];
    }
    z += 0.25 * std::tanh(c[0]) * std::tanh(c[1]) + 0.25 * std::tanh(c[2] * c[4]);
    for (int f = 0; f < kNumCat; ++f) {
      const std::int64_t rank = zipf_[f](r);
      const auto row = static_cast<std::int64_t>(perm_[f](static_cast<std::uint64_t>(rank - 1)));
      rows[static_cast<std::size_t>(f) * stride] = row;
      z += hidden_effect(f, row);
    }
    return z;
  }

  void calibrate() {
    constexpr int kM = 20000;
    std::vector<double> z(kM);
    float dense[kNumDense];
    std::int64_t rows[kNumCat];
    for (int m = 0; m < kM; ++m) {
      Rng r(hash_combine(cfg_.seed ^ 0xca11b7a7eULL, static_cast<std::uint64_t>(m)));
      z[m] = draw_features(r, dense, rows, 1);
    }
    double lo = -20, hi = 20;
    for (int it = 0; it < 60; ++it) {
      const double mid = 0.5 * (lo + hi);
      double mean = 0;
      for (double v : z) mean += 1.0 / (1.0 + std::exp(-(v + mid)));
      mean /= kM;
      (mean < cfg_.positive_rate ? lo : hi) = mid;
    }
    intercept_ = 0.5 * (lo + hi);
  }

  SyntheticConfig cfg_;
  std::vector<std::int64_t> rows_;
  std::array<double, kNumDense> miss_{}, mu_{}, sd_{}, weight_{};
  std::array<double, kNumCat> sigma_{};
  std::vector<ZipfSampler> zipf_;
  std::vector<FeistelPermutation> perm_;
  double intercept_ = 0;
};

// Samples [first, first + count) of the world's stream, generated in parallel.
class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(const SyntheticWorld& w, std::uint64_t first, std::uint64_t count)
      : w_(w), first_(first), count_(count) {}
  void reset() override { pos_ = 0; }
  bool next(Batch& b, int max_batch) override {
    if (pos_ >= count_) return false;
    const int n =
        static_cast<int>(std::min<std::uint64_t>(static_cast<std::uint64_t>(max_batch), count_ - pos_));
    b.resize(n, kNumCat, true);
    const std::uint64_t base = first_ + pos_;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; ++i) {
      float label = 0;
      const double p = w_.sample(base + static_cast<std::uint64_t>(i), b.dense.col(i).data(),
                                 b.indices.data() + i, static_cast<std::size_t>(n), label);
      b.labels[i] = label;
      b.p_true[i] = static_cast<float>(p);
    }
    pos_ += static_cast<std::uint64_t>(n);
    return true;
  }
  std::uint64_t size_hint() const override { return count_; }

 private:
  const SyntheticWorld& w_;
  std::uint64_t first_, count_, pos_ = 0;
};

// The DataSetup of the synthetic stream: samples [0, train) train, [train, train + test) test.
inline DataSetup make_synthetic_data(std::shared_ptr<const SyntheticWorld> w, std::uint64_t train,
                                     std::uint64_t test) {
  DataSetup d;
  d.table_rows = w->table_rows();
  d.train_size = train;
  d.test_size = test;
  const SyntheticConfig& c = w->config();
  std::ostringstream desc;
  desc << "synthetic Criteo-Kaggle-like (scale " << c.scale << ", Zipf " << c.zipf_exponent << ", data seed "
       << c.seed << "): " << train << " train / " << test << " test samples";
  d.description = desc.str();
  d.make_train = [w, train] { return std::make_unique<SyntheticSource>(*w, 0, train); };
  d.make_test = [w, train, test] { return std::make_unique<SyntheticSource>(*w, train, test); };
  return d;
}

}  // namespace dlrm
