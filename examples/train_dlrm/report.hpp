// train_dlrm's report of a set of runs: the markdown table, the JSON records and the
// gnuplot chart of log loss against embedding memory.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "run.hpp"

namespace dlrm {

struct Aggregate {
  RunSpec spec;
  std::vector<RunResult> runs;
  std::vector<double> rel;  // per seed: (logloss - fp32 logloss) / fp32 logloss
};

// One value per seed of a config, as the table and the JSON summarize them.
struct RunColumns {
  std::vector<double> ll, auc, acc, hr, t;  // log loss, AUC, accuracy, hit rate, train seconds
};
inline RunColumns columns(const Aggregate& a) {
  RunColumns c;
  for (const auto& r : a.runs) {
    c.ll.push_back(r.logloss);
    c.auc.push_back(r.auc);
    c.acc.push_back(r.accuracy);
    c.hr.push_back(r.hit_rate);
    c.t.push_back(r.train_seconds);
  }
  return c;
}

inline std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "—";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline std::string bytes_str(double b) {
  if (b <= 0) return "0";
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, unit[u]);
  return buf;
}

inline void print_table(const std::vector<Aggregate>& aggs, int seeds, double bayes) {
  std::cout << "\n| config | emb. memory | vs FP32 | hit rate | log loss" << (seeds > 1 ? " (mean ± sd)" : "")
            << " | Δ log loss vs FP32 | AUC | accuracy | train time |\n"
            << "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& a : aggs) {
    const RunColumns c = columns(a);
    const auto& r0 = a.runs.front();
    const MeanSd L = mean_sd(c.ll), A = mean_sd(c.auc), R = mean_sd(a.rel);
    std::cout << "| " << a.spec.label << " | "
              << (r0.memory_bytes ? bytes_str(static_cast<double>(r0.memory_bytes)) : "—") << " | "
              << (r0.memory_bytes ? fmt("%.2fx", r0.reduction) : "—") << " | "
              << fmt("%.1f%%", 100 * mean_sd(c.hr).mean) << " | " << fmt("%.5f", L.mean)
              << (seeds > 1 ? " ± " + fmt("%.5f", L.sd) : "") << " | "
              << (a.rel.empty()
                      ? "—"
                      : fmt("%+.2f%%", 100 * R.mean) + (seeds > 1 ? " ± " + fmt("%.2f", 100 * R.sd) : ""))
              << " | " << fmt("%.4f", A.mean) << (seeds > 1 ? " ± " + fmt("%.4f", A.sd) : "") << " | "
              << fmt("%.4f", mean_sd(c.acc).mean) << " | " << fmt("%.1fs", mean_sd(c.t).mean) << " |\n";
  }
  if (bayes >= 0)
    std::cout << "\nBayes-optimal log loss (true p on the same test set): " << fmt("%.5f", bayes) << "\n";
}

inline nlohmann::json to_json(const std::vector<Aggregate>& aggs, double label_mean) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& a : aggs) {
    const RunColumns c = columns(a);
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : a.runs) {
      auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
      runs.push_back({{"seed", r.spec.seed},
                      {"logloss", r.logloss},
                      {"auc", num(r.auc)},
                      {"accuracy", r.accuracy},
                      {"hit_rate", num(r.hit_rate)},
                      {"hits", r.hits},
                      {"misses", r.misses},
                      {"evictions", r.evictions},
                      {"writebacks", r.writebacks},
                      {"saturated_rows", r.saturated_rows},
                      {"train_loss", r.train_loss},
                      {"emb_lr", r.spec.emb_lr},
                      {"diverged", r.diverged},
                      {"train_seconds", r.train_seconds},
                      {"eval_seconds", r.eval_seconds},
                      {"bayes_logloss",
                       r.bayes_logloss >= 0 ? nlohmann::json(r.bayes_logloss) : nlohmann::json(nullptr)}});
    }
    const auto& r0 = a.runs.front();
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    nlohmann::json rec = {
        {"config", a.spec.label},
        {"storage", a.spec.storage},
        {"cache", a.spec.cache},
        {"cache_fraction", a.spec.cache_fraction},
        {"cache_rows", r0.cache_rows},
        {"rounding", a.spec.rounding},
        {"optimizer", a.spec.optimizer},
        {"state_precision", a.spec.state_precision},
        {"dim", a.spec.dim},
        {"large_dim", a.spec.large_dim},
        {"large_hash", a.spec.large_hash},
        {"large_tier", a.spec.large_tier},
        {"range_growth", a.spec.range_growth},
        {"total_rows", r0.total_rows},
        {"memory_bytes", r0.memory_bytes},
        {"memory_ratio", r0.memory_bytes ? nlohmann::json(r0.reduction) : nlohmann::json(nullptr)},
        {"logloss_delta_pct",
         a.rel.empty() ? nlohmann::json(nullptr) : nlohmann::json(100.0 * mean_sd(a.rel).mean)},
        {"logloss_delta_pct_sd",
         a.rel.empty() ? nlohmann::json(nullptr) : nlohmann::json(100.0 * mean_sd(a.rel).sd)},
        {"store_bytes", r0.store_bytes},
        {"cache_bytes", r0.cache_bytes},
        {"metadata_bytes", r0.metadata_bytes},
        {"optimizer_bytes", r0.optimizer_bytes},
        {"fp32_bytes", r0.fp32_bytes},
        {"reduction", r0.memory_bytes ? nlohmann::json(r0.reduction) : nlohmann::json(nullptr)},
        {"hit_rate", num(mean_sd(c.hr).mean)},
        {"logloss", mean_sd(c.ll).mean},
        {"logloss_sd", mean_sd(c.ll).sd},
        {"auc", num(mean_sd(c.auc).mean)},
        {"auc_sd", num(mean_sd(c.auc).sd)},
        {"accuracy", mean_sd(c.acc).mean},
        {"rel_logloss_vs_fp32",
         a.rel.empty() ? nlohmann::json(nullptr) : nlohmann::json(mean_sd(a.rel).mean)},
        {"rel_logloss_vs_fp32_sd",
         a.rel.empty() ? nlohmann::json(nullptr) : nlohmann::json(mean_sd(a.rel).sd)},
        {"bayes_logloss", r0.bayes_logloss >= 0 ? nlohmann::json(r0.bayes_logloss) : nlohmann::json(nullptr)},
        {"label_mean_logloss", label_mean >= 0 ? nlohmann::json(label_mean) : nlohmann::json(nullptr)},
        {"train_seconds", mean_sd(c.t).mean},
        {"epochs", a.spec.epochs},
        {"batch_size", a.spec.batch_size},
        {"lr", a.spec.lr},
        {"emb_lr", a.spec.emb_lr},
        {"seeds", a.runs.size()},
        {"runs", runs}};
    out.push_back(rec);
  }
  return out;
}

// Log loss vs embedding memory, one point per config, drawn by gnuplot
// through a pipe. PNG (pngcairo) unless the path ends in .svg.
inline bool write_plot(const std::string& path, const std::vector<Aggregate>& aggs, double bayes,
                       const std::string& title) {
  FILE* gp = popen("gnuplot", "w");
  if (!gp) return false;
  const bool svg = path.size() > 4 && path.substr(path.size() - 4) == ".svg";
  std::ostringstream s;
  s << (svg ? "set terminal svg size 1000,650 dynamic font 'sans,11'\n"
            : "set terminal pngcairo size 1000,650 font 'sans,10'\n");
  s << "set output '" << path << "'\n";
  s << "set title \"" << title << "\" noenhanced\n";
  s << "set xlabel 'embedding memory (MiB, store + cache + metadata + optimizer state)'\nset ylabel 'test "
       "log loss'\n";
  s << "set logscale x\nset grid\nset key bottom right\n";
  double dense = -1;
  for (const auto& a : aggs)
    if (a.spec.storage == "dense") {
      dense = mean_sd(columns(a).ll).mean;
    }
  // y range: every point, the dense-only line and the Bayes line, padded 5 %.
  double ylo = bayes > 0 ? bayes : 1e300, yhi = dense > 0 ? dense : -1e300;
  for (const auto& a : aggs)
    for (const auto& r : a.runs) {
      ylo = std::min(ylo, r.logloss);
      yhi = std::max(yhi, r.logloss);
    }
  if (yhi > ylo) s << "set yrange [" << ylo - 0.05 * (yhi - ylo) << ":" << yhi + 0.05 * (yhi - ylo) << "]\n";
  // The round-to-nearest series only when a config rounds to nearest (gnuplot warns about
  // an empty data block).
  bool any_nearest = false;
  for (const auto& a : aggs)
    any_nearest |= a.spec.rounding == "nearest" && a.spec.storage != "fp32" && a.spec.storage != "dense";
  std::string plots =
      "plot '-' using 1:2:3 with yerrorbars pt 7 lc rgb '#1f77b4' title 'stochastic rounding (FP32 incl.)', ";
  if (any_nearest)
    plots += "'-' using 1:2:3 with yerrorbars pt 9 lc rgb '#d62728' title 'round to nearest', ";
  plots += "'-' using 1:2:3 with labels offset 0.8,0.6 left font ',8' notitle noenhanced";
  if (dense > 0)
    s << "set arrow from graph 0, first " << dense << " to graph 1, first " << dense
      << " nohead dt 2 lc rgb '#555555'\n"
      << "set label 'dense-only' at graph 0.01, first " << dense << " offset 0,0.5 font ',9'\n";
  if (bayes > 0)
    s << "set arrow from graph 0, first " << bayes << " to graph 1, first " << bayes
      << " nohead dt 3 lc rgb '#2ca02c'\n"
      << "set label 'Bayes-optimal' at graph 0.01, first " << bayes << " offset 0,0.5 font ',9'\n";
  s << plots << "\n";
  for (int pass = 0; pass < 3; ++pass) {
    if (pass == 1 && !any_nearest) continue;
    for (const auto& a : aggs) {
      if (a.spec.storage == "dense") continue;
      const bool nearest = a.spec.rounding == "nearest" && a.spec.storage != "fp32";
      if ((pass == 0 && nearest) || (pass == 1 && !nearest)) continue;
      const MeanSd m = mean_sd(columns(a).ll);
      s << static_cast<double>(a.runs.front().memory_bytes) / (1024.0 * 1024.0) << " " << m.mean << " ";
      if (pass == 2)
        s << "\"" << a.spec.label << "\"\n";
      else
        s << m.sd << "\n";
    }
    s << "e\n";
  }
  const std::string script = s.str();
  std::fwrite(script.data(), 1, script.size(), gp);
  return pclose(gp) == 0;
}

}  // namespace dlrm
