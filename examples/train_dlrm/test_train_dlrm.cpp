// Tests for the train_dlrm example's parts that do not need the library:
// the Criteo reader, the hashing, the synthetic generator, the metrics and the
// backward pass of the dense model.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data.hpp"
#include "divergence.hpp"
#include "hash.hpp"
#include "metrics.hpp"
#include "model.hpp"
#include "reshape.hpp"
#include "synthetic.hpp"

#ifndef DLRM_SAMPLE_TSV
#define DLRM_SAMPLE_TSV ""
#endif

using namespace dlrm;

namespace {

std::string make_line(const std::string& label, const std::vector<std::string>& dense,
                      const std::vector<std::string>& cat) {
  std::string s = label;
  for (const auto& d : dense) s += "\t" + d;
  for (const auto& c : cat) s += "\t" + c;
  return s;
}

std::string good_line(const std::string& label = "1") {
  std::vector<std::string> dense(13, "3");
  std::vector<std::string> cat(26, "0a1B2c3D");
  return make_line(label, dense, cat);
}

struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& content) {
    path = std::filesystem::temp_directory_path() /
           ("train_dlrm_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".tsv");
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

}  // namespace

TEST_CASE("parse: a well-formed line") {
  Sample s;
  std::vector<std::string> dense = {"0", "-5", "", "7", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  std::vector<std::string> cat(26, "ffffffff");
  cat[3] = "";
  cat[4] = "0000002a";
  REQUIRE(parse_criteo_line(make_line("1", dense, cat), s).empty());
  CHECK(s.label == 1.0f);
  CHECK(s.dense[0] == 0.0f);                                          // log(1 + 0)
  CHECK(s.dense[1] == 0.0f);                                          // negative -> max(x, 0) = 0
  CHECK(s.dense[2] == 0.0f);                                          // empty -> 0
  CHECK(s.dense[3] == doctest::Approx(std::log(8.0)).epsilon(1e-6));  // float rounding of log(8)
  CHECK_FALSE(s.cat_present[3]);
  CHECK(s.cat_present[4]);
  CHECK(s.cat[4] == 42u);
  CHECK(s.cat[0] == 0xffffffffu);
  // Windows line ending is tolerated.
  CHECK(parse_criteo_line(good_line() + "\r", s).empty());
  // All-empty features are fine.
  CHECK(parse_criteo_line(make_line("0", std::vector<std::string>(13), std::vector<std::string>(26)), s)
            .empty());
  CHECK(s.label == 0.0f);
}

TEST_CASE("parse: malformed lines are rejected with a reason") {
  Sample s;
  CHECK_FALSE(parse_criteo_line("", s).empty());
  CHECK_FALSE(parse_criteo_line(good_line() + "\textra", s).empty());  // 41 fields
  std::string short_line = good_line();
  short_line.resize(short_line.rfind('\t'));
  CHECK_FALSE(parse_criteo_line(short_line, s).empty());      // 39 fields
  CHECK_FALSE(parse_criteo_line(good_line("2"), s).empty());  // label
  CHECK_FALSE(parse_criteo_line(good_line(""), s).empty());   // empty label
  std::vector<std::string> dense(13, "1");
  std::vector<std::string> cat(26, "01234567");
  dense[5] = "1.5";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());  // non-integer
  dense[5] = "abc";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());
  dense[5] = "99999999999999999999999";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());  // overflows int64
  dense[5] = "1";
  cat[7] = "0123456g";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());  // non-hex
  cat[7] = "0123456";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());  // 7 digits
  cat[7] = "012345678";
  CHECK_FALSE(parse_criteo_line(make_line("0", dense, cat), s).empty());  // 9 digits
  cat[7] = "01234567";
  CHECK(parse_criteo_line(make_line("0", dense, cat), s).empty());
}

TEST_CASE("reader: skips and reports malformed lines, strict mode throws") {
  const std::string content = good_line("1") + "\n" + good_line("x") + "\n" + good_line("0") + "\n" +
                              "garbage\n" + good_line("0");  // no final newline
  TempFile f(content);
  {
    CriteoReader r(f.path.string(), false);
    Sample s;
    int n = 0, pos = 0;
    while (r.next(s)) {
      ++n;
      pos += s.label > 0.5f;
    }
    CHECK(n == 3);
    CHECK(pos == 1);
    CHECK(r.malformed().count == 2);
    REQUIRE(r.malformed().first.size() == 2);
    CHECK(r.malformed().first[0].rfind("line 2:", 0) == 0);
    CHECK(r.malformed().first[1].rfind("line 4:", 0) == 0);
  }
  {
    CriteoReader r(f.path.string(), true);
    Sample s;
    CHECK(r.next(s));
    CHECK_THROWS_AS(r.next(s), MalformedLine);
  }
  {  // line range
    CriteoReader r(f.path.string(), false, 3, 5);
    Sample s;
    int n = 0;
    while (r.next(s)) ++n;
    CHECK(n == 2);
    CHECK(r.malformed().count == 1);
  }
  CHECK(count_lines(f.path.string()) == 5);
  const ScanResult sc = scan_criteo(f.path.string(), 100, false);
  CHECK(sc.valid == 3);
  CHECK(sc.lines == 5);
  CHECK(sc.distinct[0] == 1);
  CHECK(table_rows_from_scan(sc, 100)[0] == 2);  // one value + the missing row
}

TEST_CASE("reader: missing file and directory are clear errors") {
  CHECK_THROWS_AS(CriteoReader("/nonexistent/dir/file.tsv", false), DataError);
  CHECK_THROWS_AS(CriteoReader(std::filesystem::temp_directory_path().string(), false), DataError);
  CHECK_THROWS_AS(count_lines("/nonexistent/file.tsv"), DataError);
}

TEST_CASE("reader: the real Criteo sample parses 1000 lines with 21 clicks") {
  const std::string path = DLRM_SAMPLE_TSV;
  if (path.empty() || !std::filesystem::exists(path)) {
    MESSAGE("sample not found, skipped: '" << path << "'");
    return;
  }
  const ScanResult sc = scan_criteo(path, 1u << 20, true);
  CHECK(sc.lines == 1000);
  CHECK(sc.valid == 1000);
  CHECK(sc.positives == 21);
  CHECK(sc.malformed.count == 0);
  // Categorical 6 (column 20) takes exactly two hashes in this sample
  // (`cut -f20 | sort | uniq -c`: 867 x 6fcd6dcb, 133 x 919c68e4).
  CHECK(sc.distinct[5] == 2);
  for (int k = 0; k < kNumCat; ++k) CHECK(sc.distinct[k] <= 1000);
  const auto rows = table_rows_from_scan(sc, 100);
  FileBatchSource src(path, rows, true, 1, 0, sc.valid);
  Batch b;
  std::uint64_t n = 0, pos = 0;
  while (src.next(b, 128)) {
    n += static_cast<std::uint64_t>(b.size);
    for (float y : b.labels) pos += y > 0.5f;
    for (std::size_t j = 0; j < b.indices.size(); ++j) {
      const int t = static_cast<int>(j / static_cast<std::size_t>(b.size));
      CHECK(b.indices[j] >= 0);
      CHECK(b.indices[j] < rows[t]);
    }
  }
  CHECK(n == 1000);
  CHECK(pos == 21);
}

TEST_CASE("hashing: splitmix64 reference value and the row scheme") {
  // First output of the reference splitmix64 generator seeded with 0.
  CHECK(splitmix64(0) == 0xe220a8397b1dcdafULL);
  CHECK(criteo_row(false, 0xdeadbeef, 3, 100) == 0);
  // Same hash in two features goes to unrelated rows (deterministic values).
  CHECK(criteo_row(true, 0x12345678, 0, 1000) == criteo_row(true, 0x12345678, 0, 1000));
  CHECK(criteo_row(true, 0x12345678, 0, 1u << 30) != criteo_row(true, 0x12345678, 1, 1u << 30));
  // Present values never use the missing row and cover rows 1..rows-1
  // roughly uniformly: 110000 hashes into 11 rows, 10000 expected each,
  // binomial sd ~95; 6 sd = 570 keeps a false failure below 1e-8.
  std::vector<int> count(12, 0);
  for (std::uint32_t h = 0; h < 110000; ++h) {
    const auto r = criteo_row(true, h * 2654435761u, 5, 12);
    REQUIRE(r >= 1);
    REQUIRE(r < 12);
    ++count[static_cast<std::size_t>(r)];
  }
  for (int r = 1; r < 12; ++r) CHECK(std::abs(count[r] - 10000) < 570);
}

TEST_CASE("synthetic: Zipf sampler matches the exact pmf") {
  // n = 10, s = 1.05, 200000 draws: each bin within 6 binomial sd of n p
  // (a false failure has probability < 1e-8 per bin).
  const int n = 10;
  const double s = 1.05;
  ZipfSampler z(n, s);
  Rng rng(7);
  std::vector<int> c(n + 1, 0);
  const int draws = 200000;
  for (int i = 0; i < draws; ++i) {
    const auto k = z(rng);
    REQUIRE(k >= 1);
    REQUIRE(k <= n);
    ++c[static_cast<std::size_t>(k)];
  }
  double norm = 0;
  for (int k = 1; k <= n; ++k) norm += std::pow(k, -s);
  for (int k = 1; k <= n; ++k) {
    const double p = std::pow(k, -s) / norm;
    const double sd = std::sqrt(draws * p * (1 - p));
    CHECK(std::abs(c[k] - draws * p) < 6 * sd);
  }
  // n = 1 always returns 1.
  ZipfSampler one(1, 1.05);
  for (int i = 0; i < 100; ++i) CHECK(one(rng) == 1);
}

TEST_CASE("synthetic: Feistel permutation is a bijection") {
  for (std::uint64_t n : {2ull, 3ull, 7ull, 1000ull, 4096ull, 5000ull}) {
    FeistelPermutation p(n, 99);
    std::set<std::uint64_t> seen;
    for (std::uint64_t x = 0; x < n; ++x) {
      const auto y = p(x);
      REQUIRE(y < n);
      seen.insert(y);
    }
    CHECK(seen.size() == n);
  }
}

TEST_CASE("synthetic: deterministic, batch-size independent, ~25 % positives") {
  SyntheticConfig cfg;
  cfg.scale = 0.001;
  cfg.seed = 3;
  SyntheticWorld w1(cfg), w2(cfg);
  CHECK(w1.table_rows() == w2.table_rows());
  CHECK(w1.table_rows()[2] == 10131);  // round(10131227 * 0.001)
  CHECK(w1.table_rows()[8] == 2);      // max(2, round(3 * 0.001))
  CHECK(w1.intercept() == w2.intercept());
  const std::uint64_t N = 20000;
  SyntheticSource a(w1, 0, N), b(w2, 0, N);
  Batch ba, bb;
  std::vector<float> la, lb, pa;
  std::vector<std::int64_t> ia, ib;
  while (a.next(ba, 1000)) {
    la.insert(la.end(), ba.labels.begin(), ba.labels.end());
    pa.insert(pa.end(), ba.p_true.begin(), ba.p_true.end());
    for (int i = 0; i < ba.size; ++i) ia.push_back(ba.indices[static_cast<std::size_t>(5) * ba.size + i]);
  }
  while (b.next(bb, 777)) {
    lb.insert(lb.end(), bb.labels.begin(), bb.labels.end());
    for (int i = 0; i < bb.size; ++i) ib.push_back(bb.indices[static_cast<std::size_t>(5) * bb.size + i]);
  }
  CHECK(la == lb);  // bitwise: pure function of (seed, i)
  CHECK(ia == ib);
  double pos = 0, pmean = 0;
  for (std::size_t i = 0; i < la.size(); ++i) {
    pos += la[i];
    pmean += pa[i];
  }
  pos /= N;
  pmean /= N;
  // The intercept is calibrated on 20000 other samples: both the calibration
  // and this estimate have binomial-ish sd ~0.003; 0.02 is > 4 combined sd.
  CHECK(pos == doctest::Approx(0.25).epsilon(0.08));  // 0.25 +- 0.02
  CHECK(pmean == doctest::Approx(0.25).epsilon(0.08));
  // Different seed -> different stream.
  cfg.seed = 4;
  SyntheticWorld w3(cfg);
  SyntheticSource c(w3, 0, 1000);
  Batch bc;
  c.next(bc, 1000);
  CHECK(std::vector<float>(bc.labels.begin(), bc.labels.end()) !=
        std::vector<float>(la.begin(), la.begin() + 1000));
  // Ids are skewed: the most frequent row of a big field takes a large share,
  // and it is not row 0 (rows are permuted).
  std::vector<int> cnt(static_cast<std::size_t>(w1.table_rows()[5]), 0);
  for (auto r : ia) ++cnt[static_cast<std::size_t>(r)];
  const auto top = std::max_element(cnt.begin(), cnt.end()) - cnt.begin();
  CHECK(cnt[static_cast<std::size_t>(top)] >
        static_cast<int>(N / 10));  // field 5 has 24 rows: rank 1 has ~24 %
}

TEST_CASE("metrics: hand-computed AUC, log loss, accuracy") {
  {
    const std::vector<float> s = {0.1f, 0.4f, 0.35f, 0.8f}, y = {0, 0, 1, 1};
    // positives 0.35 (beats 0.1, loses to 0.4), 0.8 (beats both): 3 of 4 pairs.
    CHECK(roc_auc(s, y) == doctest::Approx(0.75).epsilon(1e-12));
  }
  {
    const std::vector<float> s = {0.5f, 0.5f, 0.2f, 0.9f}, y = {1, 0, 0, 1};
    // pos 0.5: tie with neg 0.5 (1/2), beats 0.2; pos 0.9 beats both: 3.5 / 4.
    CHECK(roc_auc(s, y) == doctest::Approx(0.875).epsilon(1e-12));
  }
  {
    const std::vector<float> s = {0.3f, 0.3f, 0.3f}, y = {1, 0, 0};
    CHECK(roc_auc(s, y) == doctest::Approx(0.5).epsilon(1e-12));
    const std::vector<float> y1 = {1, 1, 1};
    CHECK(std::isnan(roc_auc(s, y1)));
  }
  {
    const std::vector<float> p = {0.5f, 0.9f, 0.2f, 0.0f}, y = {1, 1, 0, 1};
    // ln2 - ln0.9 - ln0.8 - ln(1e-7 clip), / 4; float inputs are rounded so
    // the relative tolerance is 1e-6.
    const double want = (std::log(2.0) - std::log(0.9) - std::log(0.8) - std::log(1e-7)) / 4;
    CHECK(log_loss(p, y) == doctest::Approx(want).epsilon(1e-6));
    CHECK(accuracy(p, y) == doctest::Approx(0.5).epsilon(1e-12));  // 0.5 is not > 0.5
  }
  const MeanSd m = mean_sd({1.0, 2.0, 3.0});
  CHECK(m.mean == doctest::Approx(2.0).epsilon(1e-12));
  CHECK(m.sd == doctest::Approx(1.0).epsilon(1e-12));
}

TEST_CASE("model: interaction matches naive dot products") {
  const int D = 3, T = 2, B = 2;
  Interaction<double> inter{D, T};
  MatT<double> z(D, B);
  z << 1, 2, 3, 4, 5, 6;  // comma initialiser fills row by row
  std::vector<double> emb(static_cast<std::size_t>(B) * T * D);
  for (std::size_t i = 0; i < emb.size(); ++i) emb[i] = 0.5 * static_cast<double>(i) - 2;
  MatT<double> out;
  inter.forward(z, emb.data(), out);
  REQUIRE(out.rows() == D + 3);
  for (int b = 0; b < B; ++b) {
    std::vector<std::vector<double>> v(T + 1, std::vector<double>(D));
    for (int d = 0; d < D; ++d) v[0][d] = z(d, b);
    for (int t = 0; t < T; ++t)
      for (int d = 0; d < D; ++d) v[t + 1][d] = emb[static_cast<std::size_t>(b * T * D + t * D + d)];
    int p = D;
    for (int i = 0; i <= T; ++i)
      for (int j = i + 1; j <= T; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += v[i][d] * v[j][d];
        CHECK(out(p++, b) == doctest::Approx(dot).epsilon(1e-14));  // exact small integers/halves
      }
    for (int d = 0; d < D; ++d) CHECK(out(d, b) == z(d, b));
  }
}

TEST_CASE("model: finite-difference gradient check (double precision)") {
  // Central differences with h = 1e-6 in double: truncation error ~h^2 * f'''
  // ~1e-12 and cancellation error ~1e-16 * |L| / h ~1e-10, so an absolute
  // tolerance of 1e-7 (plus 1e-6 relative) separates real bugs (errors of
  // order the gradient itself) from numerical noise. A ReLU kink within h of a
  // pre-activation would break the check; with random inputs that has
  // probability ~1e-5 and the inputs are fixed, so the test is deterministic.
  for (int tables : {0, 3}) {
    DlrmShape sh;
    sh.dim = 4;
    sh.tables = tables;
    sh.bottom_hidden = {5};
    sh.top_hidden = {6};
    DlrmT<double> m(sh, 11);
    const int B = 4;
    Rng rng(5);
    MatT<double> dense(13, B);
    for (int j = 0; j < 13; ++j)
      for (int b = 0; b < B; ++b) dense(j, b) = rng.uniform() * 3;
    std::vector<double> emb(static_cast<std::size_t>(B) * tables * sh.dim);
    for (auto& e : emb) e = rng.normal() * 0.5;
    const std::vector<float> y = {1, 0, 0, 1};

    auto loss = [&]() {
      MatT<double> d;
      return bce_with_logits<double>(m.forward(dense, emb.data()), y.data(), d);
    };
    MatT<double> dlogit;
    bce_with_logits<double>(m.forward(dense, emb.data()), y.data(), dlogit);
    std::vector<double> demb(emb.size());
    m.backward(dlogit, demb.data());
    // Save analytic gradients before the loss() calls overwrite caches.
    std::vector<MatT<double>> gW;
    std::vector<VecT<double>> gb;
    std::vector<Linear<double>*> layers;
    for (auto* mlp : {&m.bottom, &m.top})
      for (auto& L : mlp->layers) {
        layers.push_back(&L);
        gW.push_back(L.dW);
        gb.push_back(L.db);
      }
    const double h = 1e-6;
    auto check = [&](double& param, double analytic) {
      const double keep = param;
      param = keep + h;
      const double lp = loss();
      param = keep - h;
      const double lm = loss();
      param = keep;
      const double numeric = (lp - lm) / (2 * h);
      CHECK(std::abs(numeric - analytic) <= 1e-7 + 1e-6 * std::abs(analytic));
    };
    for (std::size_t l = 0; l < layers.size(); ++l) {
      for (Eigen::Index i = 0; i < layers[l]->W.size(); ++i) check(layers[l]->W.data()[i], gW[l].data()[i]);
      for (Eigen::Index i = 0; i < layers[l]->b.size(); ++i) check(layers[l]->b.data()[i], gb[l].data()[i]);
    }
    for (std::size_t i = 0; i < emb.size(); ++i) check(emb[i], demb[i]);
  }
}

// A plain FP32 embedding bag with MixedDimEmbedding's members that ReshapedTables uses:
// table t is (rows[t], dims[t]); output (B, sum D_t); backward records the gradient.
struct PlainMixedDim {
  std::vector<std::int64_t> rows;
  std::vector<int> dims;
  std::vector<std::vector<float>> w;  // per table (rows, D_t)
  std::vector<float> last_grad;
  std::int64_t num_tables() const { return static_cast<std::int64_t>(dims.size()); }
  std::int64_t total_dim() const {
    std::int64_t s = 0;
    for (int d : dims) s += d;
    return s;
  }
  std::int32_t dim(std::int64_t t) const { return dims[static_cast<std::size_t>(t)]; }
  std::int64_t column(std::int64_t t) const {
    std::int64_t c = 0;
    for (std::int64_t u = 0; u < t; ++u) c += dims[static_cast<std::size_t>(u)];
    return c;
  }
  void forward_inference(std::span<const std::int64_t> idx, std::span<const std::int64_t> off,
                         std::span<float> out, int, std::span<const float> psw = {}) const {
    const std::size_t T = dims.size(), B = (off.size() - 1) / T;
    const auto W = static_cast<std::size_t>(total_dim());
    std::fill(out.begin(), out.end(), 0.0f);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t b = 0; b < B; ++b)
        for (auto i = off[t * B + b]; i < off[t * B + b + 1]; ++i) {
          const auto r = idx[static_cast<std::size_t>(i)];
          REQUIRE(r >= 0);
          REQUIRE(r < rows[t]);
          for (int d = 0; d < dims[t]; ++d)
            out[b * W + static_cast<std::size_t>(column(static_cast<std::int64_t>(t))) +
                static_cast<std::size_t>(d)] += (psw.empty() ? 1.0f : psw[static_cast<std::size_t>(i)]) *
                                                w[t][static_cast<std::size_t>(r * dims[t] + d)];
        }
  }
  void forward(std::span<const std::int64_t> idx, std::span<const std::int64_t> off, std::span<float> out,
               int p, std::span<const float> psw = {}) {
    forward_inference(idx, off, out, p, psw);
  }
  void backward(std::span<const float> g, int) { last_grad.assign(g.begin(), g.end()); }
  void get_weights(std::int64_t t, std::span<float> out, std::int64_t first) const {
    const auto& v = w[static_cast<std::size_t>(t)];
    std::copy_n(v.begin() + first * dim(t), out.size(), out.begin());
  }
  void set_weights(std::int64_t t, std::span<const float> in, std::int64_t first) {
    std::copy(in.begin(), in.end(), w[static_cast<std::size_t>(t)].begin() + first * dim(t));
  }
};

TEST_CASE("reshape: hashed ids, zero padding to D and the padding's gradient dropped") {
  // Table 0: 10 ids hashed into 4 rows at D_0 = 2; table 1: 3 rows at D_1 = D = 4. B = 2.
  PlainMixedDim md{{4, 3}, {2, 4}, {}, {}};
  md.w.resize(2);
  for (int t = 0; t < 2; ++t)
    for (std::int64_t i = 0; i < md.rows[static_cast<std::size_t>(t)] * md.dims[static_cast<std::size_t>(t)];
         ++i)
      md.w[static_cast<std::size_t>(t)].push_back(static_cast<float>(100 * t + i));
  ReshapedTables<PlainMixedDim> emb(md, 4, {4, 0});
  const std::vector<std::int64_t> idx = {1, 5, 7, 2, 0, 1};  // t0: {1, 5} {7}; t1: {2} {0, 1}
  const std::vector<std::int64_t> off = {0, 2, 3, 4, 6};
  std::vector<float> out(2 * 2 * 4, -1.0f);
  emb.forward(std::span<const std::int64_t>(idx), std::span<const std::int64_t>(off), std::span<float>(out),
              0);
  // Exact: sums of small integers. 5 mod 4 = 1 and 7 mod 4 = 3.
  const std::vector<float> want = {2 * 2.0f, 2 * 3.0f, 0, 0, 108,       109,       110,       111,
                                   6,        7,        0, 0, 100 + 104, 101 + 105, 102 + 106, 103 + 107};
  CHECK(out == want);
  CHECK(idx[1] == 5);  // the caller's ids are not changed
  std::vector<float> inf(out.size(), -1.0f);
  const ReshapedTables<PlainMixedDim>& c = emb;
  c.forward_inference(std::span<const std::int64_t>(idx), std::span<const std::int64_t>(off),
                      std::span<float>(inf), 0);
  CHECK(inf == want);
  std::vector<float> g(out.size());
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i);
  emb.backward(std::span<const float>(g), 0);
  // (B, D_0 + D_1) = (2, 6): each table's first D_t values of its D-wide slot.
  const std::vector<float> want_g = {0, 1, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15};
  CHECK(md.last_grad == want_g);
  // Per-sample weights (multi-hot formats) pass through to the tables: t0 b0 1 * row 1 + 2 *
  // row 1, t0 b1 0.5 * row 3, t1 b1 3 * row 0 + row 1 (exact in float).
  const std::vector<float> psw = {1, 2, 0.5f, 1, 3, 1};
  emb.forward(std::span<const std::int64_t>(idx), std::span<const std::int64_t>(off), std::span<float>(out),
              0, std::span<const float>(psw));
  const std::vector<float> want_w = {6, 9, 0, 0, 108, 109, 110, 111, 3, 3.5f, 0, 0, 404, 408, 412, 416};
  CHECK(out == want_w);
}

TEST_CASE("divergence: label-mean baseline is the entropy of the positive rate") {
  // H(p) written out: p = 0.25 gives 0.25 ln 4 + 0.75 ln(4/3). Relative tolerance 1e-12: both
  // sides are a few double logs and products, so they differ by a few ulps at most.
  CHECK(label_mean_log_loss(0.25) ==
        doctest::Approx(0.25 * std::log(4.0) + 0.75 * std::log(4.0 / 3.0)).epsilon(1e-12));
  CHECK(label_mean_log_loss(0.5) == doctest::Approx(std::log(2.0)).epsilon(1e-12));
  // predicting 0.25 on labels with positive rate 0.5: 0.5 ln 4 + 0.5 ln(4/3)
  CHECK(constant_prediction_log_loss(0.25, 0.5) ==
        doctest::Approx(0.5 * std::log(4.0) + 0.5 * std::log(4.0 / 3.0)).epsilon(1e-12));
  // clamped as the metrics clip probabilities: no NaN at a pure label set. With p clamped to
  // 1e-7 the loss is -ln(1 - 1e-7) ~ 1e-7, so below 1e-5 (and far from the unclamped NaN).
  CHECK(std::isfinite(label_mean_log_loss(0.0)));
  CHECK(label_mean_log_loss(0.0) < 1e-5);
}

TEST_CASE("divergence: collapse or a lasting climb above the baseline stops the run; noise does not") {
  // Batches of 100 with 25 positives: every window's baseline is H(0.25) = 0.56234.
  const double b = label_mean_log_loss(0.25);
  auto no_sat = [] { return std::uint64_t{0}; };
  SUBCASE("learns, then the predictions collapse at the baseline: flagged at the end of that window") {
    DivergenceMonitor m;
    for (int i = 0; i < 30; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, no_sat).empty());  // 20 % below: learnt
    for (int i = 0; i < 9; ++i) CHECK(m.add(b, 100, 25, 0.001, no_sat).empty());       // window not complete
    const std::string why = m.add(b, 100, 25, 0.001, no_sat);
    CHECK(why.find("collapsed to one value at step 40") != std::string::npos);
    CHECK(why.find("no row write saturated") != std::string::npos);
  }
  SUBCASE("at the baseline with spread predictions (a noisy stretch): not flagged") {
    DivergenceMonitor m;
    for (int i = 0; i < 30; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, no_sat).empty());
    for (int i = 0; i < 100; ++i) CHECK(m.add(b, 100, 25, 1.0, no_sat).empty());
  }
  SUBCASE("the last three windows together 2 % above the baseline: flagged; one bad window: not") {
    DivergenceMonitor m;
    for (int i = 0; i < 30; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, no_sat).empty());
    // one window 5 % above between windows 3 % below: (1.05 + 0.97 + 0.97) / 3 < 1.02
    for (int i = 0; i < 10; ++i) CHECK(m.add(1.05 * b, 100, 25, 1.0, no_sat).empty());
    for (int i = 0; i < 20; ++i) CHECK(m.add(0.97 * b, 100, 25, 1.0, no_sat).empty());
    // then 1.0, 1.0, 1.07: the three together 2.33 % above; flagged at the end of the third
    for (int i = 0; i < 20; ++i) CHECK(m.add(1.0 * b, 100, 25, 1.0, no_sat).empty());
    for (int i = 0; i < 9; ++i) CHECK(m.add(1.07 * b, 100, 25, 1.0, no_sat).empty());
    const std::string why = m.add(1.07 * b, 100, 25, 1.0, no_sat);
    CHECK(why.find("over the last 30 batches is 2.3 % above the label-mean baseline at step 90") !=
          std::string::npos);
  }
  SUBCASE("a window's baseline follows its own labels: more positives, a higher baseline") {
    DivergenceMonitor m;
    for (int i = 0; i < 30; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, no_sat).empty());
    // 40 % positives at the running rate ~0.3: baseline CE(p, 0.4) > H(0.25); a loss of
    // 1.1 H(0.25) is below it, so never "above the baseline"
    for (int i = 0; i < 60; ++i) CHECK(m.add(1.1 * b, 100, 40, 1.0, no_sat).empty());
  }
  SUBCASE("never learnt (a hard data set): at the baseline from the start is not a divergence") {
    DivergenceMonitor m;
    for (int i = 0; i < 200; ++i) CHECK(m.add(1.05 * b, 100, 25, 0.001, no_sat).empty());
  }
  SUBCASE("never learnt and 10 % above the baseline (a run away from the start): flagged from window 4") {
    DivergenceMonitor m;
    // windows 1-3 are not judged, however high (a slow start)
    for (int i = 0; i < 30; ++i) CHECK(m.add(1.5 * b, 100, 25, 1.0, no_sat).empty());
    // window 4: (1.5 + 1.5 + 1.0) / 3 above 1.1: flagged at its end
    for (int i = 0; i < 9; ++i) CHECK(m.add(1.0 * b, 100, 25, 1.0, no_sat).empty());
    const std::string why = m.add(1.0 * b, 100, 25, 1.0, no_sat);
    CHECK(why.find("over the last 30 batches is 33.3 % above the label-mean baseline at step 40") !=
          std::string::npos);
    CHECK(why.find("was never 3 % below it") != std::string::npos);
  }
  SUBCASE("a slow start that then learns, and a run 9 % above throughout: not flagged") {
    DivergenceMonitor slow, above;
    // (1.2 + 1.2 + 0.5) / 3 < 1.02: the lasting-climb rule, judged once it has learnt, stays quiet too
    for (int i = 0; i < 30; ++i) CHECK(slow.add(1.2 * b, 100, 25, 1.0, no_sat).empty());
    for (int i = 0; i < 100; ++i) CHECK(slow.add(0.5 * b, 100, 25, 1.0, no_sat).empty());
    for (int i = 0; i < 200; ++i) CHECK(above.add(1.09 * b, 100, 25, 1.0, no_sat).empty());
  }
  SUBCASE("a non-finite loss is flagged at once, with the saturated-row count as a cause") {
    DivergenceMonitor m;
    std::uint64_t sat = 0;
    auto sat_now = [&] { return sat; };
    for (int i = 0; i < 10; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, sat_now).empty());
    sat = 7;
    for (int i = 0; i < 2; ++i) CHECK(m.add(0.8 * b, 100, 25, 1.0, sat_now).empty());
    const std::string why = m.add(std::numeric_limits<double>::infinity(), 100, 25, 1.0, sat_now);
    CHECK(why.find("not finite at step 13") != std::string::npos);
    CHECK(why.find("7 row writes saturated the store format's range (7 in the last window)") !=
          std::string::npos);
  }
}

TEST_CASE("reshape: a tiered table's hot id takes a private row that starts as its shared row") {
  // Table 0: 10 ids, 2 private rows then 4 shared ones, D_0 = 2; promoted at its second
  // counted batch. Table 1: 3 rows at D = 4, untouched. B = 1.
  mpe::TieredRowsConfig tc;
  tc.ids = 10;
  tc.private_rows = 2;
  tc.shared_rows = 4;
  tc.promote_at = 2;
  tc.decay_every = 1000;
  PlainMixedDim md{{6, 3}, {2, 4}, {}, {}};
  md.w.resize(2);
  for (int t = 0; t < 2; ++t)
    for (std::int64_t i = 0; i < md.rows[static_cast<std::size_t>(t)] * md.dims[static_cast<std::size_t>(t)];
         ++i)
      md.w[static_cast<std::size_t>(t)].push_back(static_cast<float>(100 * t + i));
  ReshapedTables<PlainMixedDim> emb(md, 4, {6, 0}, {tc, std::nullopt});
  REQUIRE(emb.tier(1) == nullptr);
  const mpe::TieredRows& tier = *emb.tier(0);
  const std::int64_t shared = tier.row_of(7);
  REQUIRE(shared >= 2);                             // a cold id: one of the shared rows [2, 6)
  const std::vector<std::int64_t> idx = {7, 7, 1};  // t0: {7, 7}; t1: {1}
  const std::vector<std::int64_t> off = {0, 2, 3};
  const std::vector<float> want = {
      2 * static_cast<float>(2 * shared), 2 * static_cast<float>(2 * shared + 1), 0, 0, 104, 105, 106, 107};
  std::vector<float> out(8, -1.0f);
  const auto run = [&] {
    emb.forward(std::span<const std::int64_t>(idx), std::span<const std::int64_t>(off), std::span<float>(out),
                0);
  };
  run();  // counted once (ids are counted once per batch): still cold
  CHECK(out == want);
  CHECK(tier.row_of(7) == shared);
  CHECK(tier.last_moves().empty());
  run();  // the second count promotes 7 into private row 0, a copy of its shared row
  REQUIRE(tier.last_moves().size() == 1);
  CHECK(tier.last_moves()[0].from_row == shared);
  CHECK(tier.last_moves()[0].to_row == 0);
  CHECK(tier.row_of(7) == 0);
  CHECK(out == want);  // exact: the private row holds the shared row's weights
  CHECK(md.w[0][0] == static_cast<float>(2 * shared));
  CHECK(md.w[0][1] == static_cast<float>(2 * shared + 1));
  // The shared row trains on without the id; changing it no longer reaches id 7.
  md.w[0][static_cast<std::size_t>(2 * shared)] = -5.0f;
  std::vector<float> inf(8, -1.0f);
  const ReshapedTables<PlainMixedDim>& c = emb;
  c.forward_inference(std::span<const std::int64_t>(idx), std::span<const std::int64_t>(off),
                      std::span<float>(inf), 0);
  CHECK(inf == want);
  CHECK(tier.stats().promotions == 1);
}
