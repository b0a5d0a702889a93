// Binary-classification metrics and small statistics helpers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

namespace dlrm {

// Probabilities are clipped to [eps, 1 - eps] (eps = 1e-7, as common in CTR
// evaluation) so a confident mistake costs at most -log(1e-7) ~ 16.1.
inline double log_loss(std::span<const float> p, std::span<const float> y, double eps = 1e-7) {
  if (p.empty()) return std::numeric_limits<double>::quiet_NaN();
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double q = std::clamp(static_cast<double>(p[i]), eps, 1.0 - eps);
    s -= y[i] > 0.5f ? std::log(q) : std::log1p(-q);
  }
  return s / static_cast<double>(p.size());
}

// ROC AUC = P(score of a random positive > score of a random negative), ties
// counting 1/2 (Mann-Whitney U with average ranks). NaN if a class is absent.
inline double roc_auc(std::span<const float> score, std::span<const float> y) {
  const std::size_t n = score.size();
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return score[a] < score[b]; });
  double pos = 0, rank_sum = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && score[order[j]] == score[order[i]]) ++j;
    const double avg_rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j
    for (std::size_t k = i; k < j; ++k)
      if (y[order[k]] > 0.5f) {
        pos += 1;
        rank_sum += avg_rank;
      }
    i = j;
  }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return std::numeric_limits<double>::quiet_NaN();
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

inline double accuracy(std::span<const float> p, std::span<const float> y, float threshold = 0.5f) {
  if (p.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::size_t ok = 0;
  for (std::size_t i = 0; i < p.size(); ++i) ok += ((p[i] > threshold) == (y[i] > 0.5f)) ? 1 : 0;
  return static_cast<double>(ok) / static_cast<double>(p.size());
}

struct MeanSd {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double sd = 0;  // sample standard deviation (n - 1); 0 for n = 1
};

inline MeanSd mean_sd(const std::vector<double>& v) {
  MeanSd r;
  if (v.empty()) return r;
  r.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - r.mean) * (x - r.mean);
    r.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return r;
}

}  // namespace dlrm
