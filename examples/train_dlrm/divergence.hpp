// Divergence detection for a training run: a run that has learnt and then falls back to
// (or below) what predicting the label mean scores, or whose loss is no longer finite, is
// stopped with a message instead of finishing quietly at the baseline. No library include:
// the trainer feeds it the batch losses, labels and logits, and the embedding's
// saturated-row count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

namespace dlrm {

// Thrown by the trainer when DivergenceMonitor flags a run (main: --on-divergence).
struct Diverged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A rate as printed in messages ("%g").
inline std::string fmt_g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Cross-entropy of predicting p for labels whose positive rate is q (p clamped to
// [1e-7, 1 - 1e-7] as the metrics clip probabilities). With q = p: the label-mean
// baseline H(p), what a model that learnt nothing scores.
inline double constant_prediction_log_loss(double p, double q) {
  p = std::clamp(p, 1e-7, 1.0 - 1e-7);
  return -(q * std::log(p) + (1.0 - q) * std::log(1.0 - p));
}
inline double label_mean_log_loss(double p) { return constant_prediction_log_loss(p, p); }

// Watches the training loss in windows of `window` batches. A window's baseline is the loss
// of predicting the positive rate of every training label seen so far on that window's
// labels (so a window richer in positives than the mean has a higher baseline). The run is
// flagged
//   - at once, by a batch whose loss is not finite;
//   - once it has learnt (a window at least `learnt_margin` below its baseline), by a
//     window whose predictions have collapsed (the mean over its batches of the logits'
//     standard deviation within a batch below `collapsed_logit_sd`) with a loss within
//     `back_margin` of its baseline or above: the model predicts one value for every sample;
//   - once it has learnt, by the last `worse_windows` windows together (their summed loss
//     against their summed baselines) at least `worse_margin` above the baseline: worse than
//     predicting the mean over a stretch longer than one noisy window;
//   - never having learnt, after its first `unlearnt_after` windows, by the last
//     `worse_windows` windows together at least `unlearnt_margin` above the baseline: a run
//     that runs away from the start (INT2 with stochastic rounding at a too high embedding
//     rate) and never gets below the baseline, while a hard data set leaves a model near it.
// Each window also reads the embedding's stats().saturated_rows, which the message names
// as a likely cause when it grew.
class DivergenceMonitor {
 public:
  int window = 10;                         // batches per window
  double learnt_margin = 0.03;             // a window 3 % below its baseline: the model has learnt
  double back_margin = 0.005;              // collapsed predictions within 0.5 % of the baseline (or above)
  double collapsed_logit_sd = 0.02;        // logits closer than this (probabilities within ~0.5 %)
  double worse_margin = 0.02;              // the last windows together 2 % above their baseline ...
  static constexpr int worse_windows = 3;  // ... this many windows
  double unlearnt_margin = 0.10;           // never learnt: the last windows together 10 % above
  int unlearnt_after = 3;                  // ... from the window after this many

  // Adds one batch: its mean loss, its size, its number of positive labels and the
  // standard deviation of its logits. Returns an empty string, or the reason when this
  // batch (non-finite loss) or the window it ends flags the run. `saturated_rows_now()`:
  // the embedding's running count (0 without embeddings), asked only then and at the end
  // of each window.
  template <class SaturatedRows>
  std::string add(double loss, int batch_size, double positives, double logit_sd,
                  SaturatedRows&& saturated_rows_now) {
    ++step_;
    if (!std::isfinite(loss)) {  // at once: the next backward would refuse the gradient
      const std::uint64_t sat = saturated_rows_now();
      return "the training loss is not finite at step " + std::to_string(step_) +
             saturated_note(sat, sat - sat_at_window_);
    }
    label_sum_ += positives;
    label_n_ += static_cast<std::uint64_t>(batch_size);
    win_loss_ += loss * batch_size;
    win_pos_ += positives;
    win_n_ += static_cast<std::uint64_t>(batch_size);
    win_sd_ += logit_sd;
    if (++win_batches_ < window) return {};
    const std::uint64_t saturated_rows = saturated_rows_now();
    const double n = static_cast<double>(win_n_);
    const double l = win_loss_ / n;
    const double b = constant_prediction_log_loss(positive_rate(), win_pos_ / n);
    const double sd = win_sd_ / win_batches_;
    const std::uint64_t sat_new = saturated_rows - sat_at_window_;
    win_loss_ = win_pos_ = win_sd_ = 0;
    win_n_ = 0;
    win_batches_ = 0;
    sat_at_window_ = saturated_rows;
    best_ratio_ = std::min(best_ratio_, l / b);
    const bool learnt = best_ratio_ <= 1.0 - learnt_margin;
    recent_loss_[recent_at_ % worse_windows] = l;
    recent_base_[recent_at_ % worse_windows] = b;
    ++recent_at_;
    double rl = 0, rb = 0;
    for (int i = 0; i < worse_windows; ++i) {
      rl += recent_loss_[i];
      rb += recent_base_[i];
    }
    char buf[512];
    if (learnt && sd < collapsed_logit_sd && l >= (1.0 - back_margin) * b) {
      std::snprintf(
          buf, sizeof buf,
          "the model's predictions collapsed to one value at step %llu (logit spread %.2g within a "
          "batch): the training loss %.4f over the last %d batches is back at the label-mean baseline "
          "%.4f, after reaching %.1f %% below it",
          static_cast<unsigned long long>(step_), sd, l, window, b, 100.0 * (1.0 - best_ratio_));
      return buf + saturated_note(saturated_rows, sat_new);
    }
    if (learnt && recent_at_ >= worse_windows && rl >= (1.0 + worse_margin) * rb) {
      std::snprintf(
          buf, sizeof buf,
          "the training loss over the last %d batches is %.1f %% above the label-mean baseline at step "
          "%llu (%.4f against %.4f), after reaching %.1f %% below it",
          worse_windows * window, 100.0 * (rl / rb - 1.0), static_cast<unsigned long long>(step_),
          rl / worse_windows, rb / worse_windows, 100.0 * (1.0 - best_ratio_));
      return buf + saturated_note(saturated_rows, sat_new);
    }
    if (!learnt && recent_at_ > unlearnt_after && recent_at_ >= worse_windows &&
        rl >= (1.0 + unlearnt_margin) * rb) {
      std::snprintf(
          buf, sizeof buf,
          "the training loss over the last %d batches is %.1f %% above the label-mean baseline at step "
          "%llu (%.4f against %.4f) and was never %.0f %% below it: worse than predicting the mean "
          "from the start",
          worse_windows * window, 100.0 * (rl / rb - 1.0), static_cast<unsigned long long>(step_),
          rl / worse_windows, rb / worse_windows, 100.0 * learnt_margin);
      return buf + saturated_note(saturated_rows, sat_new);
    }
    return {};
  }

  double positive_rate() const { return label_n_ ? label_sum_ / static_cast<double>(label_n_) : 0.0; }

 private:
  static std::string saturated_note(std::uint64_t total, std::uint64_t in_window) {
    if (total == 0) return "; no row write saturated";
    return "; " + std::to_string(total) + " row writes saturated the store format's range (" +
           std::to_string(in_window) + " in the last window)";
  }
  std::uint64_t step_ = 0, label_n_ = 0, win_n_ = 0, sat_at_window_ = 0;
  double label_sum_ = 0, win_loss_ = 0, win_pos_ = 0, win_sd_ = 0;
  double best_ratio_ = std::numeric_limits<double>::infinity();
  double recent_loss_[worse_windows] = {},
         recent_base_[worse_windows] = {};  // the last windows' loss, baseline
  int win_batches_ = 0, recent_at_ = 0;
};

}  // namespace dlrm
