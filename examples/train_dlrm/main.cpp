// train_dlrm: a small DLRM whose embedding tables live in one
// mpe::CachedEmbedding, trained with SGD on Criteo, libsvm, libfm (libffm) or Avazu files
// or on a deterministic synthetic stream, with a sweep over storage formats, cache
// sizes/policies and rounding modes. See README.md.
#include <CLI/CLI.hpp>
#include <Eigen/Core>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "data.hpp"
#include "divergence.hpp"
#include "file_data.hpp"
#include "formats.hpp"
#include "metrics.hpp"
#include "report.hpp"
#include "run.hpp"
#include "synthetic.hpp"

namespace dlrm {

std::string sharded_unsupported(const RunSpec& s) {
  if (s.storage == "dense") return {};
  const std::string head = "config " + s.label + ": sharded runs ";
  if (s.storage != "fp32" && s.storage != "fp16" && s.storage != "int8" && s.storage != "int4")
    return head + "need an fp32, fp16, int8 or int4 store, not " + s.storage;
  if (s.cache != "lru" && s.cache != "none") return head + "support cache lru or none, not " + s.cache;
  return {};
}

}  // namespace dlrm

namespace {

using namespace dlrm;

constexpr int kBackoffTries = 4;  // --on-divergence backoff: the rate, then up to 3 retries at a third each

struct Options {
  // data
  std::string format = "criteo";            // criteo | libsvm | libfm | avazu (file input)
  std::optional<std::string> field_bounds;  // libsvm: tables by feature id range (B1,...,Bk)
  std::string data, train, test;
  double test_fraction = 0.1;
  bool strict = false;
  std::int64_t max_rows = 1000000;
  double scale = 0.01, zipf = 1.05, effect_scale = 1.0;
  std::uint64_t train_samples = 1000000, test_samples = 100000, data_seed = 1;
  // what to run
  std::string sweep = "none";
  std::string admission = "all";  // --admission: all (the cache's own rule) or second-touch
  std::vector<std::string> configs;
  bool baselines = false;
  int seeds = 1;
  int threads = 0;
  std::string json, plot;
  bool quiet = false;
  std::string on_divergence = "stop";  // stop | backoff | ignore
};

std::string percent(double f) {
  std::ostringstream o;
  o << f * 100 << "%";
  return o.str();
}

std::string label_of(const RunSpec& s) {
  if (s.storage == "dense") return "dense-only";
  std::string l = s.storage;
  if (s.cache != "none" && s.cache_fraction > 0) l += "+" + s.cache + percent(s.cache_fraction);
  if (s.storage != "fp32") l += s.rounding == "stochastic" ? "/sr" : "/rn";
  if (s.base_dim > 0 && s.dim != s.base_dim) l += "@d" + std::to_string(s.dim);
  if (s.large_dim > 0 && s.large_dim != s.dim) l += "@md" + std::to_string(s.large_dim);  // @h alone: D
  if (s.large_hash > 0) l += "@h" + std::to_string(s.large_hash);
  if (s.large_tier > 0) l += "@t" + std::to_string(s.large_tier);
  if (s.optimizer != "sgd" || s.state_precision != "fp32") l += " " + s.optimizer + "/" + s.state_precision;
  return l;
}

std::vector<RunSpec> paper_sweep(const RunSpec& base) {
  std::vector<RunSpec> v;
  auto add = [&](const std::string& st, const std::string& cache, double frac, const std::string& rnd) {
    RunSpec s = base;
    s.storage = st;
    s.cache = frac > 0 ? cache : "none";
    s.cache_fraction = frac;
    s.rounding = rnd;
    s.label = label_of(s);
    v.push_back(s);
  };
  add("dense", "none", 0, "stochastic");
  add("fp32", "none", 0, "stochastic");
  for (const char* r : {"stochastic", "nearest"}) {
    add("fp16", "none", 0, r);
    add("int8", "none", 0, r);
    for (double f : {0.01, 0.05})
      for (const char* c : {"lru", "lfu"}) add("int8", c, f, r);
    add("fp8", "none", 0, r);
    add("fp8", "lru", 0.01, r);
    add("fp8", "lru", 0.05, r);
    add("int4", "none", 0, r);
    add("int4", "lru", 0.01, r);
    add("int4", "lru", 0.05, r);
  }
  return v;
}

RunSpec parse_config(const std::string& text, const RunSpec& base);

// The config every other is compared with: FP32, no cache, every table whole at the run's D.
bool is_fp32_reference(const RunSpec& s, const RunSpec& base) {
  return s.storage == "fp32" && s.cache == "none" && s.dim == base.dim && s.large_dim == 0;
}

// The memory/log-loss frontier (--sweep frontier): the FP32 reference and dense-only, each
// store at the run's D with and without a small cache, smaller D (a uniform D/2 and D/4
// for every table: the simplest mixed-dimension choice) with the low-precision stores, and
// the large tables alone hashed into fewer rows or at a smaller D.
// Memory counts weights, cache, metadata and optimizer state.
std::vector<RunSpec> frontier_sweep(const RunSpec& base) {
  std::vector<std::string> labels = {
      "dense-only", "fp32",          "fp16/sr",         "int8/sr", "int8+lru5%/sr", "int8+stlru5%/sr",
      "int4/sr",    "int4+lru1%/sr", "int4+stlru1%/sr", "int2/sr", "int2+lru1%/sr", "int2+stlru1%/sr"};
  for (int div : {2, 4}) {
    const std::string d = "@d" + std::to_string(std::max(1, base.dim / div));
    for (const char* c :
         {"fp32", "int8+lru1%/sr", "int4+lru1%/sr", "int4+stlru1%/sr", "int2+lru1%/sr", "int2+stlru1%/sr"})
      labels.push_back(std::string(c) + d);
  }
  // The large tables (each >= 1 % of all rows) reshaped, the others as at D: hashed into
  // 2, 3, 4 times fewer rows (@h<k>; the cache a fraction of the hashed rows, so 3 % at @h3
  // has about the slots of 1 % unhashed), at D/4 (@md<d>, zero-padded to D), and both.
  // Not with --shard (the reshaped tables are one process's MixedDimEmbedding).
  if (base.shard == "none") {
    for (const char* h : {"@h2", "@h3", "@h4"}) labels.push_back(std::string("int4+stlru1%/sr") + h);
    labels.push_back("int4+stlru3%/sr@h3");
    labels.push_back("int2+stlru1%/sr@h2");
    if (base.dim >= 2) {
      labels.push_back("int4+stlru1%/sr@md" + std::to_string(std::max(1, base.dim / 4)));
      labels.push_back("int4+stlru1%/sr@md" + std::to_string(std::max(1, base.dim / 2)) + "@h2");
    }
  }
  std::vector<RunSpec> v;
  for (const auto& l : labels) v.push_back(parse_config(l, base));
  return v;
}

// Parses a config label as printed in the table: "dense-only", "fp32",
// "int8/sr", "int8+lru5%/rn", "int4+lfu1%/sr", "int2+lru1%/sr", "fp16+direct0.5%/sr", and any of
// them with "@d<D>" at the end: that config's embedding dimension instead of --dim
// ("int4+lru1%/sr@d16"), then optionally "@md<d>" (the large tables, each holding >= 1 % of
// all rows, at D = d, zero-padded to D in the model), "@h<k>" (the large tables' ids
// hashed into ceil(rows / k) rows) and "@t<p>" (after @h: the hashed tables tiered by
// mpe::TieredRows, up to p % of their ids in rows of their own): "int4+stlru1%/sr@h3",
// "int4+lru1%/sr@md16@h2", "int4+stlru1%/sr@h8@t2".
RunSpec parse_config(const std::string& text, const RunSpec& base) {
  RunSpec s = base;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("--configs: cannot parse '" + text + "': " + why);
  };
  std::string body = text;
  // Suffixes come in the order @d<D>, @md<d>, @h<k>, each at most once. A reshaping suffix
  // (@md, @h) ends the label: its number is the digits after it (at most `max_digits`), the
  // label before it parses to the config it reshapes.
  const auto reshaped = [&](const char* tag, std::size_t max_digits,
                            const char* rule) -> std::optional<std::pair<RunSpec, int>> {
    const auto at = text.rfind(tag);
    if (at == std::string::npos) return std::nullopt;
    const std::string n = text.substr(at + std::strlen(tag));
    const std::string suffix = std::string(tag) + (tag[1] == 'h' ? "<k>" : "<d>");
    if (n.empty() || n.size() > max_digits ||
        !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw bad(suffix + " needs " + rule + ", digits only, in the order @d, @md, @h");
    if (text.substr(0, at).find(tag) != std::string::npos) throw bad(suffix + " given twice");
    RunSpec r = parse_config(text.substr(0, at), s);
    if (r.storage == "dense") throw bad(suffix + " needs embedding tables");
    if (r.shard != "none") throw bad(suffix + " is not built with --shard");
    if (r.rounding != "stochastic" || r.state_precision != "fp32")
      throw bad(suffix + " is built with stochastic rounding (/sr) and --state-precision fp32 only");
    return std::pair{r, std::stoi(n)};
  };
  if (const auto at = text.rfind("@t"); at != std::string::npos) {
    // "@t<p>" after @h<k>: the hashed tables tiered, p % of their ids in rows of their own.
    const std::string n = text.substr(at + 2);
    if (n.empty() || n.size() > 2 ||
        !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) || std::stoi(n) < 1)
      throw bad("@t<p> needs p in [1, 99] (percent), digits only, after @h<k>");
    RunSpec r = parse_config(text.substr(0, at), s);
    if (r.large_hash == 0 || r.large_tier != 0) throw bad("@t<p> comes once, right after @h<k>");
    r.large_tier = std::stoi(n);
    r.label = label_of(r);
    return r;
  }
  if (auto h = reshaped("@h", 7, "k in [2, 10^6]")) {
    auto& [r, k] = *h;
    if (k < 2 || k > 1000000) throw bad("@h<k> needs k in [2, 10^6]");
    if (r.large_dim == 0) r.large_dim = r.dim;
    r.large_hash = k;
    r.label = label_of(r);
    return r;
  }
  if (auto md = reshaped("@md", 4, "d in [1, D)")) {
    auto& [r, dim] = *md;
    if (dim < 1 || dim >= r.dim) throw bad("@md<d> needs d in [1, D) (D = " + std::to_string(r.dim) + ")");
    r.large_dim = dim;
    r.label = label_of(r);
    return r;
  }
  if (const auto at = text.rfind("@d"); at != std::string::npos) {
    const std::string n = text.substr(at + 2);
    body = text.substr(0, at);
    std::size_t used = 0;
    int dim = 0;
    try {
      dim = std::stoi(n, &used);
    } catch (const std::logic_error&) {
      throw bad("@d needs a dimension, e.g. @d16");
    }
    if (used != n.size() || dim < 1 || dim > 4096) throw bad("@d<D> needs D in [1, 4096]");
    s.dim = dim;
    s.base_dim = base.dim;
  }
  if (body != text) return parse_config(body, s);  // s carries the dim and base_dim
  if (text == "dense" || text == "dense-only") {
    s.storage = "dense";
    s.cache = "none";
    s.cache_fraction = 0;
    s.label = label_of(s);
    return s;
  }
  std::string main_part = text;
  if (const auto slash = text.find('/'); slash != std::string::npos) {
    const std::string r = text.substr(slash + 1);
    main_part = text.substr(0, slash);
    if (r == "sr" || r == "stochastic")
      s.rounding = "stochastic";
    else if (r == "rn" || r == "nearest")
      s.rounding = "nearest";
    else
      throw bad("rounding must be sr or rn");
  }
  s.cache = "none";
  s.cache_fraction = 0;
  if (const auto plus = main_part.find('+'); plus != std::string::npos) {
    std::string c = main_part.substr(plus + 1);
    main_part = main_part.substr(0, plus);
    if (!c.empty() && c.back() == '%') c.pop_back();
    std::size_t i = 0;
    while (i < c.size() && std::isalpha(static_cast<unsigned char>(c[i]))) ++i;
    s.cache = c.substr(0, i);
    if (s.cache != "lru" && s.cache != "lfu" && s.cache != "direct" && s.cache != "stlru")
      throw bad("cache must be lru, lfu, direct or stlru (second-touch LRU)");
    try {
      std::size_t used = 0;
      s.cache_fraction = std::stod(c.substr(i), &used) / 100.0;
      if (used != c.size() - i || !(s.cache_fraction > 0 && s.cache_fraction <= 1))
        throw bad("cache percentage");
    } catch (const std::logic_error&) {
      throw bad("cache percentage must be a number in (0, 100]");
    }
  }
  const char* const storages[] = {"fp32", "fp16", "int8", "fp8", "int4", "int2"};
  if (std::find(std::begin(storages), std::end(storages), main_part) == std::end(storages))
    throw bad("storage must be fp32, fp16, int8, fp8, int4 or int2");
  s.storage = main_part;
  s.label = label_of(s);
  return s;
}

RunResult run_one(const RunSpec& s, const DataSetup& d) {
  if (s.storage == "dense") return run_dense_only(s, d);
  if (s.shard != "none") return run_sharded(s, d);
  if (s.storage == "fp32") return run_fp32(s, d);
  if (s.storage == "fp16") return run_fp16(s, d);
  if (s.storage == "int8") return run_int8(s, d);
  if (s.storage == "fp8") return run_fp8(s, d);
  if (s.storage == "int4") return run_int4(s, d);
  if (s.storage == "int2") return run_int2(s, d);
  throw std::invalid_argument("unknown storage '" + s.storage + "'");
}

DataSetup make_data(const Options& o, std::shared_ptr<SyntheticWorld>& world) {
  DataSetup d;
  if (!o.data.empty() || !o.train.empty()) {
    FileDataOptions f;
    f.format = parse_format(o.format);
    f.data = o.data;
    f.train = o.train;
    f.test = o.test;
    f.test_fraction = o.test_fraction;
    f.strict = o.strict;
    f.max_rows = o.max_rows;
    if (o.field_bounds) f.field_bounds = parse_field_bounds(*o.field_bounds);
    d = make_file_data(f);
  } else {
    SyntheticConfig sc;
    sc.scale = o.scale;
    sc.zipf_exponent = o.zipf;
    sc.effect_scale = o.effect_scale;
    sc.seed = o.data_seed;
    world = std::make_shared<SyntheticWorld>(sc);
    d = make_synthetic_data(world, o.train_samples, o.test_samples);
  }
  return d;
}

// MPI_Finalize on every way out of main once MPI_Init ran.
struct DistGuard {
  bool on = false;
  ~DistGuard() {
    if (on) dlrm::dist_finalize();
  }
};

}  // namespace

#ifndef DLRM_WITH_MPI
namespace dlrm {
RunResult run_sharded(const RunSpec&, const DataSetup&) { throw std::logic_error("built without MPI"); }
bool dist_available() { return false; }
void dist_init(int*, char***) {}
void dist_finalize() {}
int dist_rank() { return 0; }
}  // namespace dlrm
#endif

int main(int argc, char** argv) {
  Options o;
  RunSpec base;
  CLI::App app{"train_dlrm: a small DLRM with mixed-precision cached embeddings (mpe)"};
  app.set_version_flag("--version", "train_dlrm (mpe example)");
  auto* g_data = "Data";
  app.add_option("--format", o.format,
                 "file format: criteo (TSV: label, 13 integers, 26 hex categories), libsvm (label "
                 "feature:value ...; one table, or --field-bounds), libfm (libffm's label "
                 "field:feature:value ...; a table per field), avazu (Kaggle Avazu CSV: click, a table per "
                 "other column but id, hour as hour of day); the last three have no dense features")
      ->group(g_data)
      ->check(CLI::IsMember({"criteo", "libsvm", "libfm", "libffm", "avazu"}));
  app.add_option_function<std::string>(
         "--field-bounds", [&o](const std::string& v) { o.field_bounds = v; },
         "libsvm: feature ids B1<B2<...<Bk split the features into k+1 tables (ids < B1, [B1, B2), "
         "..., >= Bk); default one table holding every feature of a sample in one bag")
      ->group(g_data);
  app.add_option("--data", o.data, "input file; its last --test-fraction of lines: test set")->group(g_data);
  app.add_option("--test-fraction", o.test_fraction,
                 "with --data: fraction of data lines (at the end) held out")
      ->group(g_data)
      ->check(CLI::Range(0.0, 1.0).description("in (0, 1)"));
  auto* opt_train = app.add_option("--train", o.train, "training file (with --test)")->group(g_data);
  auto* opt_test = app.add_option("--test", o.test, "test file (with --train)")->group(g_data);
  opt_train->needs(opt_test);
  opt_test->needs(opt_train);
  app.add_flag("--strict", o.strict, "a malformed line is fatal (exit 3) instead of skipped")->group(g_data);
  app.add_option("--max-rows-per-table", o.max_rows, "file input: table rows = min(cardinality + 1, this)")
      ->group(g_data)
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1} << 40));
  app.add_option("--scale", o.scale, "synthetic: Kaggle cardinalities times this, min 2 rows")
      ->group(g_data)
      ->check(CLI::PositiveNumber);
  app.add_option("--zipf", o.zipf, "synthetic: Zipf exponent of the id distribution")
      ->group(g_data)
      ->check(CLI::PositiveNumber);
  app.add_option("--effect-scale", o.effect_scale, "synthetic: scale of the hidden per-row effects")
      ->group(g_data)
      ->check(CLI::NonNegativeNumber);
  app.add_option("--train-samples", o.train_samples, "synthetic: training samples per epoch")
      ->group(g_data)
      ->check(CLI::PositiveNumber);
  app.add_option("--test-samples", o.test_samples, "synthetic: test samples")
      ->group(g_data)
      ->check(CLI::PositiveNumber);
  app.add_option("--data-seed", o.data_seed, "synthetic: seed of the hidden model and the sample stream")
      ->group(g_data);

  auto* g_cfg = "Configuration";
  app.add_option("--storage", base.storage, "store format")
      ->group(g_cfg)
      ->check(CLI::IsMember({"fp32", "fp16", "int8", "fp8", "int4", "int2", "dense"}));
  app.add_option("--cache", base.cache,
                 "cache policy: lru, lfu, direct, stlru (second-touch LRU: a miss replaces a row only from "
                 "its second touch), none")
      ->group(g_cfg)
      ->check(CLI::IsMember({"lru", "lfu", "direct", "stlru", "none"}));
  app.add_option("--admission", o.admission,
                 "which misses the LRU cache admits: all (every miss) or second-touch (--cache stlru: a miss "
                 "replaces a row only from its second touch; refused rows are read and updated in the store)")
      ->group(g_cfg)
      ->check(CLI::IsMember({"all", "second-touch"}));
  app.add_option("--cache-fraction", base.cache_fraction, "cache rows as a fraction of all rows")
      ->group(g_cfg)
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--rounding", base.rounding, "rounding into the store")
      ->group(g_cfg)
      ->check(CLI::IsMember({"stochastic", "nearest"}));
  app.add_option("--optimizer", base.optimizer,
                 "embedding optimizer (dense part: SGD); --emb-lr is its learning rate")
      ->group(g_cfg)
      ->check(CLI::IsMember({"sgd", "adagrad", "rowwise_adagrad", "adam"}));
  app.add_option("--state-precision", base.state_precision,
                 "embedding optimizer state: fp32, or bf16/fp16 (2 bytes a value, rounded with --rounding; "
                 "cached rows keep theirs in FP32)")
      ->group(g_cfg)
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--dim", base.dim, "embedding dimension D (also the bottom MLP output)")
      ->group(g_cfg)
      ->check(CLI::Range(1, 4096));
  app.add_option("--sweep", o.sweep,
                 "none; paper: dense-only, FP32, FP16, INT8 x {0,1,5 %} x {LRU,LFU}, FP8 E4M3 x {0,1,5 % "
                 "LRU}, INT4 x {0,1,5 %}, each x {stochastic,nearest}; frontier: memory (weights + optimizer "
                 "state) vs log loss, each store with and without a cache at D, D/2 and D/4, and the large "
                 "tables hashed (@h2, @h3, @h4) or at D/4 (@md)")
      ->group(g_cfg)
      ->check(CLI::IsMember({"none", "paper", "frontier"}));
  app.add_option("--configs", o.configs,
                 "comma-separated config labels as in the table, e.g. "
                 "fp32,int8+lru5%/sr,int4/rn,dense-only,int4+stlru1%/sr@h3 (instead of "
                 "--storage/--cache/...; suffixes @d<D>, @md<d>, @h<k>, @t<p>: see the README)")
      ->group(g_cfg)
      ->delimiter(',');
  app.add_flag("--baselines", o.baselines, "also run FP32 and dense-only next to the chosen config")
      ->group(g_cfg);

  auto* g_train = "Training";
  app.add_option("--seed", base.seed, "model seed (init, stochastic rounding)")->group(g_train);
  app.add_option("--seeds", o.seeds, "repeat with seeds seed, seed+1, ...; report mean and sd")
      ->group(g_train)
      ->check(CLI::Range(1, 1000));
  app.add_option("--epochs", base.epochs, "passes over the training data")
      ->group(g_train)
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch-size", base.batch_size, "mini-batch size")
      ->group(g_train)
      ->check(CLI::Range(1, 1 << 20));
  auto* opt_lr = app.add_option("--lr", base.lr, "SGD learning rate (dense and embeddings)")
                     ->group(g_train)
                     ->check(CLI::PositiveNumber);
  auto* opt_emb_lr =
      app.add_option("--emb-lr", base.emb_lr, "SGD learning rate of the embeddings (default: --lr)")
          ->group(g_train)
          ->check(CLI::PositiveNumber);
  app.add_option("--range-growth", base.range_growth,
                 "bound on a store row's range growth per update, as a fraction of its range "
                 "(EmbeddingConfig::max_range_growth; int8/int4/int2 stores only, others ignore it; 0 = off; "
                 "e.g. 0.01 keeps int2/sr stable at high --emb-lr)")
      ->group(g_train)
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--emb-init", base.emb_init, "embeddings start ~ U(-a, a)")
      ->group(g_train)
      ->check(CLI::PositiveNumber);
  app.add_option("--bottom-mlp", base.bottom_hidden, "bottom MLP hidden sizes (13 -> ... -> D)")
      ->group(g_train)
      ->delimiter(',');
  app.add_option("--top-mlp", base.top_hidden, "top MLP hidden sizes (... -> 1)")
      ->group(g_train)
      ->delimiter(',');
  app.add_option("--shard", base.shard,
                 "run under mpirun -np N: shard the tables table-wise, row-wise, column-wise or auto "
                 "(mixed); one rank prints")
      ->group(g_train)
      ->check(CLI::IsMember({"none", "table", "row", "column", "auto"}));
  app.add_option("--comm-precision", base.comm_precision,
                 "with --shard: pooled vectors and their gradients on the wire as fp32, fp16 or bf16 "
                 "(rounded with --rounding)")
      ->group(g_train)
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));
  app.add_option("--on-divergence", o.on_divergence,
                 "a run whose training loss returns to the label-mean baseline after learning: stop (exit 4 "
                 "with the cause), backoff (retry it with the embedding lr divided by 3, up to 3 times, and "
                 "report the largest stable rate tried), ignore (finish it)")
      ->group(g_train)
      ->check(CLI::IsMember({"stop", "backoff", "ignore"}));
  app.add_option("--threads", o.threads, "OpenMP threads (0 = default)")
      ->group(g_train)
      ->check(CLI::NonNegativeNumber);

  auto* g_out = "Output";
  app.add_option("--json", o.json, "write the results as a JSON list of records")->group(g_out);
  app.add_option("--plot", o.plot,
                 "draw log loss vs memory with gnuplot (PNG, or SVG if the name ends in .svg)")
      ->group(g_out);
  app.add_flag("--quiet", o.quiet, "no progress line")->group(g_out);
  app.add_option("--loss-trace", base.loss_trace,
                 "append one CSV line per training batch (config, seed, emb_lr, epoch, batch, size, "
                 "positives, loss, logit_sd) to this file")
      ->group(g_out);

  CLI11_PARSE(app, argc, argv);
  if (!(base.range_growth >= 0.0f && base.range_growth <= 1.0f)) {  // NaN passes CLI::Range
    std::cerr << "error: --range-growth " << base.range_growth << " is not in [0, 1]\n";
    return 1;
  }
  if (o.admission == "second-touch") {  // admission is part of the cache policy: Lru -> SecondTouchLru
    if (o.sweep != "none" || !o.configs.empty()) {
      std::cerr
          << "error: --admission sets the single config's cache; a --configs or --sweep label names its "
             "own (+stlru)\n";
      return 1;
    }
    if (base.cache != "lru" && base.cache != "stlru") {
      std::cerr << "error: --admission second-touch needs --cache lru (or stlru), not " << base.cache << "\n";
      return 1;
    }
    base.cache = "stlru";
  }
  DistGuard dist;
  if (base.shard != "none" && base.state_precision != "fp32") {
    std::cerr << "error: --shard trains FP32 optimizer state only (--state-precision fp32)\n";
    return 1;
  }
  if (base.shard != "none") {
    if (!dist_available()) {
      std::cerr
          << "error: --shard needs train_dlrm built with MPI (apt-get install libopenmpi-dev openmpi-bin)\n";
      return 1;
    }
    dist_init(&argc, &argv);
    dist.on = true;
    if (dist_rank() != 0) {  // one rank prints (every rank computes the same results)
      o.quiet = true;
      o.json.clear();
      o.plot.clear();
      if (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)) return 1;
    }
  }
  if (opt_lr->count() && !opt_emb_lr->count()) base.emb_lr = base.lr;
  base.stop_on_divergence = o.on_divergence != "ignore";
  base.progress = !o.quiet;
  // OpenMP threads serve the library and the per-sample loops (interaction,
  // synthetic generation), all of which give the same bits for any thread
  // count. Eigen's own GEMM parallelisation is switched off: its blocking
  // depends on the thread count, which would change the summation order and
  // make results depend on --threads; the matrices here are small anyway.
  Eigen::setNbThreads(1);
#ifdef _OPENMP
  if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
  if (!o.data.empty() && !o.train.empty()) {
    std::cerr << "error: give either --data or --train/--test, not both\n";
    return 1;
  }
  if (o.format != "criteo" && o.data.empty() && o.train.empty()) {
    std::cerr << "error: --format " << o.format << " reads files: give --data or --train/--test\n";
    return 1;
  }
  if (o.field_bounds && o.format != "libsvm") {
    std::cerr << "error: --field-bounds is for --format libsvm, not " << o.format << "\n";
    return 1;
  }

  try {
    std::vector<RunSpec> specs;
    if (o.sweep == "paper") {
      specs = paper_sweep(base);
    } else if (o.sweep == "frontier") {
      specs = frontier_sweep(base);
    } else if (!o.configs.empty()) {
      for (const auto& c : o.configs) specs.push_back(parse_config(c, base));
    } else {
      if (base.cache == "none") base.cache_fraction = 0;
      if (base.cache_fraction == 0) base.cache = "none";
      base.label = label_of(base);
      if (o.baselines && base.storage != "dense") {
        RunSpec d = base, f = base;
        d.storage = "dense";
        d.label = label_of(d);
        f.storage = "fp32";
        f.cache = "none";
        f.cache_fraction = 0;
        f.label = label_of(f);
        specs.push_back(d);
        if (base.storage != "fp32" || base.cache != "none") specs.push_back(f);
      }
      specs.push_back(base);
    }

    if (base.shard != "none") {
      // Checked before any training: a sweep keeps what a sharded run can build (and says
      // what it left out); an explicit config that cannot run is an error.
      std::vector<RunSpec> kept;
      std::string left_out;
      for (const RunSpec& sp : specs) {
        const std::string why = sharded_unsupported(sp);
        if (why.empty()) {
          kept.push_back(sp);
        } else if (o.sweep != "none") {
          left_out += (left_out.empty() ? "" : ", ") + sp.label;
        } else {
          throw std::invalid_argument(why + " (--shard " + base.shard + ")");
        }
      }
      if (!left_out.empty())
        std::cerr << "--shard " << base.shard << ": left out of the sweep (no sharded build): " << left_out
                  << "\n";
      specs = std::move(kept);
    }

    std::shared_ptr<SyntheticWorld> world;
    const DataSetup data = make_data(o, world);
    std::int64_t total = 0;
    for (auto r : data.table_rows) total += r;
    std::cerr << "data: " << data.description << "\n"
              << "tables: " << data.table_rows.size() << ", " << total << " rows in all\n";

    std::vector<Aggregate> aggs(specs.size());
    double bayes = -1;
    const int total_runs = static_cast<int>(specs.size()) * o.seeds;
    int k = 0;
    for (int s = 0; s < o.seeds; ++s) {
      double fp32_ll = -1;
      for (std::size_t i = 0; i < specs.size(); ++i) {
        RunSpec sp = specs[i];
        sp.seed = base.seed + static_cast<std::uint64_t>(s);
        aggs[i].spec = sp;
        if (!o.quiet)
          std::cerr << "[" << ++k << "/" << total_runs << "] " << sp.label << " seed " << sp.seed << "\n";
        RunResult r;
        std::string backoff_notes;
        for (int attempt = 0;; ++attempt) {
          try {
            r = run_one(sp, data);
            break;
          } catch (const Diverged& e) {
            if (o.on_divergence != "backoff" || attempt + 1 == kBackoffTries) throw;
            std::cerr << "warning: " << e.what() << "\n    retrying with the embedding lr divided by 3\n";
            backoff_notes += std::string(backoff_notes.empty() ? "" : "; ") + "diverged at embedding lr " +
                             fmt_g(sp.emb_lr);
            sp.emb_lr /= 3.0f;
          }
        }
        if (!backoff_notes.empty()) {
          r.diverged = backoff_notes + "; trained at embedding lr " + fmt_g(sp.emb_lr) +
                       ", the largest stable rate tried";
          std::cerr << "    " << sp.label << " seed " << sp.seed << ": " << r.diverged << "\n";
        }
        if (!o.quiet)
          std::cerr << "    log loss " << fmt("%.5f", r.logloss) << "  AUC " << fmt("%.4f", r.auc)
                    << "  hit rate " << fmt("%.3f", r.hit_rate) << "  memory "
                    << bytes_str(static_cast<double>(r.memory_bytes)) << "  " << fmt("%.1f", r.train_seconds)
                    << "s\n";
        if (is_fp32_reference(sp, base)) fp32_ll = r.logloss;
        if (r.bayes_logloss >= 0) bayes = r.bayes_logloss;
        aggs[i].runs.push_back(std::move(r));
      }
      if (fp32_ll > 0)
        for (auto& a : aggs)
          if (a.spec.storage != "dense") a.rel.push_back((a.runs.back().logloss - fp32_ll) / fp32_ll);
    }

    // Memory against the FP32 config of this run (same D, same optimizer, FP32 state) where it
    // ran; otherwise against an FP32 table of the config's own D (RunResult::fp32_bytes).
    std::size_t fp32_memory = 0;
    for (const auto& a : aggs)
      if (is_fp32_reference(a.spec, base) && !a.runs.empty()) fp32_memory = a.runs.front().memory_bytes;
    for (auto& a : aggs)
      for (auto& r : a.runs)
        if (r.memory_bytes && fp32_memory)
          r.reduction = static_cast<double>(fp32_memory) / static_cast<double>(r.memory_bytes);

    std::cout << "data: " << data.description << "\n"
              << "D = " << base.dim << ", batch " << base.batch_size << ", lr " << base.lr << " (embeddings "
              << base.emb_lr << "), epochs " << base.epochs << ", seeds " << base.seed << ".."
              << base.seed + static_cast<std::uint64_t>(o.seeds) - 1 << ", " << total
              << " embedding rows; memory = store + cache + metadata + optimizer state, vs FP32 = "
              << (fp32_memory ? "the fp32 config's memory / this memory"
                              : "4*D*rows (+ FP32 state) / this memory")
              << "\n";
    print_table(aggs, o.seeds, bayes);
    if (data.label_mean_logloss >= 0)
      std::cout << "\nlabel-mean log loss (the training positive rate predicted for every test sample): "
                << fmt("%.5f", data.label_mean_logloss) << "\n";
    for (const auto& a : aggs)
      for (const auto& r : a.runs)
        if (!r.diverged.empty())
          std::cout << "note: " << a.spec.label << " seed " << r.spec.seed << ": " << r.diverged << "\n";

    if (!o.json.empty()) {
      std::ofstream js(o.json);
      if (!js) {
        std::cerr << "error: cannot write '" << o.json << "'\n";
        return 2;
      }
      js << to_json(aggs, data.label_mean_logloss).dump(2) << "\n";
    }
    if (!o.plot.empty()) {
      std::ostringstream title;
      title << "train_dlrm, D=" << base.dim << ", " << (world ? std::string("synthetic") : o.format + " file")
            << ", " << o.seeds << " seed(s)";
      if (!write_plot(o.plot, aggs, bayes, title.str()))
        std::cerr << "warning: gnuplot failed; no plot written\n";
    }
  } catch (const Diverged& e) {
    std::cerr
        << "error: " << e.what() << "\n"
        << "  the run was stopped; lower --emb-lr (a third is a usual step), or run with --on-divergence "
           "backoff to find the largest stable rate\n";
    return 4;
  } catch (const DataError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const MalformedLine& e) {
    std::cerr << "error: malformed line (--strict): " << e.what() << "\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
