// Tests of the CTR formats besides Criteo's (formats.hpp, ctr_source.hpp, file_data.hpp):
// each parser against hand-computed labels, tables, keys and weights; malformed lines with
// the file, line and token or column in the reason; the batches' bags, rows and weights; the
// --data split of an Avazu file with a header; --field-bounds items; blank lines, a byte
// order mark and control bytes in messages; the training file read before the test file;
// and the dense model without dense features.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ctr_source.hpp"
#include "file_data.hpp"
#include "formats.hpp"
#include "model.hpp"

using namespace dlrm;

namespace {

struct Fixture {
  std::filesystem::path path;
  explicit Fixture(const std::string& content) {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("train_dlrm_formats_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".txt");
    std::ofstream(path, std::ios::binary) << content;
  }
  ~Fixture() { std::filesystem::remove(path); }
  std::string str() const { return path.string(); }
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A Kaggle-layout Avazu line: id, click, hour, then 21 categorical values c0..c20.
std::string avazu_line(const std::string& click, const std::string& hour,
                       const std::string& c5 = "1fbe01fe") {
  std::string s = "10000169349117863715," + click + "," + hour;
  for (int c = 0; c < 21; ++c) s += "," + (c == 2 ? c5 : "v" + std::to_string(c));
  return s;
}

}  // namespace

TEST_CASE("formats: the row scheme and the Avazu key hash (reference values)") {
  // category_row = 1 + splitmix64(table ^ splitmix64(key)) % (rows - 1), the values from an
  // independent Python implementation of that formula.
  CHECK(category_row(0, 5, 11) == 10);
  CHECK(category_row(2, 5, 11) == 1);
  CHECK(category_row(1, 1000, 1 << 20) == 382069);
  CHECK(category_row(3, 0xcbf29ce484222325ULL, 101) == 73);
  // FNV-1a 64 test vectors (the FNV reference's "" , "a", "foobar").
  CHECK(fnv1a64("") == 0xcbf29ce484222325ULL);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cULL);
  CHECK(fnv1a64("foobar") == 0x85944171f73967e8ULL);
  CHECK(parse_format("libffm") == Format::Libfm);
  CHECK_THROWS_AS(parse_format("svm"), std::invalid_argument);
}

TEST_CASE("libsvm: labels, one table or tables by id range, values as weights") {
  CtrSample s;
  std::vector<std::string_view> tok;
  REQUIRE(parse_libsvm_line("+1 3:1 10:0.5  7:2\r", LibsvmFields{}, s, tok).empty());
  CHECK(s.label == 1.0f);
  REQUIRE(s.feats.size() == 3);
  CHECK(s.feats[0].table == 0);
  CHECK(s.feats[1].table == 0);
  CHECK(s.feats[2].table == 0);
  CHECK(s.feats[0].key == 3);
  CHECK(s.feats[1].key == 10);
  CHECK(s.feats[2].key == 7);
  CHECK(s.feats[1].weight == 0.5f);
  CHECK(s.feats[2].weight == 2.0f);
  // Bounds 5, 10: ids < 5 -> 0, [5, 10) -> 1, >= 10 -> 2.
  REQUIRE(parse_libsvm_line("-1 3:1 10:0.5 7:2 5:1", LibsvmFields{{5, 10}}, s, tok).empty());
  CHECK(s.label == 0.0f);
  CHECK(s.feats[0].table == 0);
  CHECK(s.feats[1].table == 2);
  CHECK(s.feats[2].table == 1);
  CHECK(s.feats[3].table == 1);
  REQUIRE(parse_libsvm_line("0", LibsvmFields{}, s, tok).empty());  // no features: the missing row
  CHECK(s.feats.empty());
  CHECK_THROWS_AS((LibsvmFields{{5, 5}}.check()), std::invalid_argument);
}

TEST_CASE("libsvm: malformed lines name the token") {
  CtrSample s;
  std::vector<std::string_view> tok;
  const LibsvmFields one;
  CHECK(parse_libsvm_line("", one, s, tok) == "empty line");
  CHECK(contains(parse_libsvm_line("2 1:1", one, s, tok), "label must be 0 or 1 (or -1/+1), got '2'"));
  CHECK(contains(parse_libsvm_line("1.0 1:1", one, s, tok), "got '1.0'"));
  CHECK(parse_libsvm_line("1 4:1 a:1", one, s, tok) ==
        "token 3 'a:1': feature id is not a non-negative integer");
  CHECK(parse_libsvm_line("1 -4:1", one, s, tok) ==
        "token 2 '-4:1': feature id is not a non-negative integer");
  CHECK(parse_libsvm_line("1 4:x", one, s, tok) == "token 2 '4:x': value is not a finite number");
  CHECK(parse_libsvm_line("1 4:inf", one, s, tok) == "token 2 '4:inf': value is not a finite number");
  CHECK(parse_libsvm_line("1 4:", one, s, tok) == "token 2 '4:': value is not a finite number");
  CHECK(parse_libsvm_line("1 4", one, s, tok) == "token 2 '4': expected feature:value");
  CHECK(parse_libsvm_line("1 0:4:1", one, s, tok) == "token 2 '0:4:1': expected feature:value");
}

TEST_CASE("libfm: field:feature:value triples, table = field") {
  CtrSample s;
  std::vector<std::string_view> tok;
  REQUIRE(parse_libfm_line("1 0:5:1 2:7:0.25 0:9:3", 3, s, tok).empty());
  CHECK(s.label == 1.0f);
  REQUIRE(s.feats.size() == 3);
  CHECK(s.feats[0].table == 0);
  CHECK(s.feats[0].key == 5);
  CHECK(s.feats[1].table == 2);
  CHECK(s.feats[1].key == 7);
  CHECK(s.feats[1].weight == 0.25f);
  CHECK(s.feats[2].table == 0);
  CHECK(s.feats[2].key == 9);
  CHECK(s.feats[2].weight == 3.0f);
  CHECK(parse_libfm_line("1 0:5:1 2:7:1", 2, s, tok) ==
        "token 3 '2:7:1': field 2 is not below 2 (the training data's fields)");
  CHECK(parse_libfm_line("1 0:5", 3, s, tok) == "token 2 '0:5': expected field:feature:value");
  CHECK(parse_libfm_line("1 x:5:1", 3, s, tok) == "token 2 'x:5:1': field is not a non-negative integer");
  CHECK(parse_libfm_line("1 0:y:1", 3, s, tok) == "token 2 '0:y:1': feature is not a non-negative integer");
  CHECK(parse_libfm_line("1 0:5:nan", 3, s, tok) == "token 2 '0:5:nan': value is not a finite number");
  CHECK(contains(parse_libfm_line("x 0:5:1", 3, s, tok), "label must be 0 or 1"));
}

TEST_CASE("avazu: click is the label, hour the hour of day, every other column but id a table") {
  const AvazuLayout l = AvazuLayout::kaggle();
  REQUIRE(l.tables() == 22);  // hour, C1, banner_pos, ..., C21
  CHECK(l.table_names[0] == "hour");
  CHECK(l.table_names[3] == "site_id");
  CHECK(l.label_col == 1);
  CtrSample s;
  std::vector<std::string_view> col;
  REQUIRE(parse_avazu_line(avazu_line("1", "14102117") + "\r", l, s, col).empty());
  CHECK(s.label == 1.0f);
  REQUIRE(s.feats.size() == 22);
  CHECK(s.feats[0].table == 0);
  CHECK(s.feats[0].key == 17);  // hour of day
  CHECK(s.feats[3].table == 3);
  CHECK(s.feats[3].key == 0xdd6c2bdd4f66656dULL);  // fnv1a64("1fbe01fe"), Python reference
  CHECK(s.feats[21].key == fnv1a64("v20"));
  for (const auto& f : s.feats) CHECK(f.weight == 1.0f);
  REQUIRE(
      parse_avazu_line(avazu_line("0", "14102100", ""), l, s, col).empty());  // empty site_id: missing row
  CHECK(s.label == 0.0f);
  CHECK(s.feats.size() == 21);
  CHECK(parse_avazu_line(avazu_line("2", "14102100"), l, s, col) ==
        "column 2 (click) must be 0 or 1, got '2'");
  CHECK(parse_avazu_line(avazu_line("0", "141021"), l, s, col) ==
        "column 3 (hour) is not YYMMDDHH: '141021'");
  CHECK(parse_avazu_line(avazu_line("0", "14102124"), l, s, col) ==
        "column 3 (hour) is not YYMMDDHH: '14102124'");
  CHECK(parse_avazu_line(avazu_line("0", "14102100") + ",x", l, s, col) ==
        "expected 24 comma-separated columns, got 25");
  // A header names the columns; no click column is a clear error.
  const AvazuLayout h = AvazuLayout::from_names({"id", "click", "C1", "hour"});
  CHECK(h.tables() == 2);
  CHECK(h.hour_col == 3);
  CHECK_THROWS_WITH_AS(AvazuLayout::from_names({"id", "hour", "C1"}), "no 'click' column (the label)",
                       std::invalid_argument);
}

TEST_CASE("reader: a libfm file's malformed line is skipped and reported, or fatal with file and line") {
  Fixture f("1 0:5:1\n1 0:5:1 1:x:1\n0 1:3:1\n");
  CtrSpec spec{Format::Libfm, {}, kMaxCtrTables};
  {
    CtrReader r(f.str(), spec, false);
    CtrSample s;
    int n = 0;
    while (r.next(s)) ++n;
    CHECK(n == 2);
    REQUIRE(r.malformed().first.size() == 1);
    CHECK(r.malformed().first[0] == "line 2: token 3 '1:x:1': feature is not a non-negative integer");
  }
  CtrReader strict(f.str(), spec, true);
  CtrSample s;
  CHECK(strict.next(s));
  const std::string why = f.str() + ": line 2: token 3 '1:x:1': feature is not a non-negative integer";
  CHECK_THROWS_WITH_AS(strict.next(s), why.c_str(), MalformedLine);
  CHECK_THROWS_AS(CtrReader("/nonexistent/x.txt", spec, false), DataError);
}

TEST_CASE("source: bags per table, the missing row, rows and weights of a libfm batch") {
  Fixture f("1 0:5:1 2:7:0.5 0:9:2\n0 1:3:1\n-1 2:7:1\n");
  CtrSpec spec{Format::Libfm, {}, kMaxCtrTables};
  const CtrScan sc = scan_ctr(f.str(), spec, 100, true);
  CHECK(sc.valid == 3);
  CHECK(sc.positives == 1);
  CHECK(sc.tables == 3);
  CHECK(sc.distinct == std::vector<std::uint64_t>{2, 1, 1});  // {5, 9}, {3}, {7}
  const auto rows = table_rows_from_ctr_scan(sc, 100);
  CHECK(rows == std::vector<std::int64_t>{3, 2, 2});
  spec.libfm_fields = 3;
  CtrFileSource src(f.str(), spec, rows, true, 1, 0, 3);
  Batch b;
  REQUIRE(src.next(b, 2));
  CHECK(b.size == 2);
  CHECK(b.dense.rows() == 0);
  CHECK(b.labels == std::vector<float>{1, 0});
  // Bags (t, b) in table-major order: (0,0) {5, 9}, (0,1) missing, (1,0) missing, (1,1) {3},
  // (2,0) {7}, (2,1) missing.
  CHECK(b.offsets == std::vector<std::int64_t>{0, 2, 3, 4, 5, 6, 7});
  const std::vector<std::int64_t> want = {category_row(0, 5, 3), category_row(0, 9, 3), 0, 0, 1, 1, 0};
  CHECK(b.indices == want);  // tables 1 and 2 have 2 rows: a present key is row 1
  CHECK(b.weights == std::vector<float>{1, 2, 1, 1, 1, 0.5f, 1});
  REQUIRE(src.next(b, 2));
  CHECK(b.size == 1);
  CHECK(b.labels == std::vector<float>{0});
  CHECK(b.offsets == std::vector<std::int64_t>{0, 1, 2, 3});
  CHECK(b.indices == std::vector<std::int64_t>{0, 0, 1});
  CHECK_FALSE(src.next(b, 2));
  // A one-index-per-bag resize after a multi-hot batch restores offsets 0, 1, ..., T*B.
  b.resize(2, 3, false);
  CHECK(b.offsets == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});
  CHECK(b.weights.empty());
}

TEST_CASE("file data: an Avazu --data split leaves the header out, no dense features") {
  std::string content = "id,click,hour,C1,site_id\n";
  for (int i = 0; i < 10; ++i)
    content += std::to_string(i) + "," + (i % 3 == 0 ? "1" : "0") + ",141021" + (i < 5 ? "03" : "04") +
               ",1005," + (i % 2 ? "a" : "b") + "\n";
  Fixture f(content);
  FileDataOptions o;
  o.format = Format::Avazu;
  o.data = f.str();
  o.test_fraction = 0.2;
  o.strict = true;
  const DataSetup d = make_file_data(o);
  CHECK(d.num_dense == 0);
  CHECK(d.train_size == 8);                                   // lines 2-9
  CHECK(d.test_size == 2);                                    // lines 10-11
  CHECK(d.table_rows == std::vector<std::int64_t>{3, 2, 3});  // hours {3, 4}, C1 {1005}, site_id {a, b}
  CHECK(contains(d.description, "lines 2-9 train, 10-11 test"));
  // Training positive rate 3/8 (i = 0, 3, 6), test 1/2 (i = 9): -(ln(3/8) + ln(5/8)) / 2.
  CHECK(d.label_mean_logloss == doctest::Approx(-(std::log(3.0 / 8) + std::log(5.0 / 8)) / 2).epsilon(1e-12));
  auto test = d.make_test();
  Batch b;
  REQUIRE(test->next(b, 10));
  CHECK(b.labels == std::vector<float>{0, 1});
  CHECK(b.weights.empty());  // Avazu values carry no weight
  // The header-less form of the same rows is the Kaggle layout (24 columns): refused.
  Fixture bare(content.substr(content.find('\n') + 1));
  o.data = bare.str();
  CHECK_THROWS_WITH_AS(make_file_data(o), doctest::Contains("expected 24 comma-separated columns, got 5"),
                       MalformedLine);
}

TEST_CASE("model: no dense features (the bottom MLP sees an empty input); finite-difference gradients") {
  // As the gradient check of test_train_dlrm.cpp: central differences, h = 1e-6, double;
  // tolerance 1e-7 + 1e-6 relative (truncation ~1e-12, cancellation ~1e-10).
  DlrmShape sh;
  sh.dense_in = 0;
  sh.dim = 3;
  sh.tables = 2;
  sh.bottom_hidden = {4};
  sh.top_hidden = {5};
  DlrmT<double> m(sh, 3);
  const int B = 3;
  const MatT<double> dense(0, B);
  Rng rng(9);
  std::vector<double> emb(static_cast<std::size_t>(B) * sh.tables * sh.dim);
  for (auto& e : emb) e = rng.normal() * 0.5;
  const std::vector<float> y = {1, 0, 1};
  MatT<double> dlogit;
  bce_with_logits<double>(m.forward(dense, emb.data()), y.data(), dlogit);
  std::vector<double> demb(emb.size());
  m.backward(dlogit, demb.data());
  const MatT<double> dW_top = m.top.layers[0].dW;
  const VecT<double> db_bottom0 = m.bottom.layers[0].db, db_bottom = m.bottom.layers[1].db;
  auto loss = [&] {
    MatT<double> d;
    return bce_with_logits<double>(m.forward(dense, emb.data()), y.data(), d);
  };
  const double h = 1e-6;
  auto check = [&](double& p, double analytic) {
    const double keep = p;
    p = keep + h;
    const double lp = loss();
    p = keep - h;
    const double lm = loss();
    p = keep;
    CHECK(std::abs((lp - lm) / (2 * h) - analytic) <= 1e-7 + 1e-6 * std::abs(analytic));
  };
  for (std::size_t i = 0; i < emb.size(); ++i) check(emb[i], demb[i]);
  for (Eigen::Index i = 0; i < dW_top.size(); ++i) check(m.top.layers[0].W.data()[i], dW_top.data()[i]);
  for (Eigen::Index i = 0; i < db_bottom.size(); ++i) check(m.bottom.layers[1].b.data()[i], db_bottom(i));
  for (Eigen::Index i = 0; i < db_bottom0.size(); ++i) check(m.bottom.layers[0].b.data()[i], db_bottom0(i));
  // The bottom output is the same for every sample (it sees no input).
  const MatT<double> z = m.bottom.infer(dense);
  CHECK(z.cols() == B);
  CHECK(z.col(0) == z.col(2));
}

TEST_CASE("--field-bounds: non-negative 64-bit items, each named as given when refused") {
  CHECK(parse_field_bounds("5,30") == std::vector<std::uint64_t>{5, 30});
  CHECK(parse_field_bounds("18446744073709551615") == std::vector<std::uint64_t>{18446744073709551615ULL});
  const auto refused = [](const char* text, const char* why) {
    CHECK_THROWS_WITH_AS(parse_field_bounds(text), why, std::invalid_argument);
  };
  refused("-1", "--field-bounds item 1 '-1' is not a non-negative integer");
  refused("-5,30", "--field-bounds item 1 '-5' is not a non-negative integer");
  refused("5,+30", "--field-bounds item 2 '+30' is not a non-negative integer");
  refused("5, 30", "--field-bounds item 2 ' 30' is not a non-negative integer");
  refused("1e3", "--field-bounds item 1 '1e3' is not a non-negative integer");
  refused("18446744073709551616", "--field-bounds item 1 '18446744073709551616' does not fit in 64 bits");
  refused("30,", "--field-bounds item 2 is empty (give B1,...,Bk, e.g. 100,200)");
  refused(",30", "--field-bounds item 1 is empty (give B1,...,Bk, e.g. 100,200)");
  refused("", "--field-bounds item 1 is empty (give B1,...,Bk, e.g. 100,200)");
  refused("5,,30", "--field-bounds item 2 is empty (give B1,...,Bk, e.g. 100,200)");
}

TEST_CASE("reader: blank lines (empty, spaces, tabs, \\r) are skipped in every format, even under --strict") {
  CtrSample s;
  const auto count = [&](const std::string& content, Format fmt) {
    Fixture f(content);
    CtrReader r(f.str(), CtrSpec{fmt, {}, kMaxCtrTables}, true);
    int n = 0;
    while (r.next(s)) ++n;
    CHECK(r.malformed().count == 0);
    return n;
  };
  CHECK(count("1 3:1\n\n   \n\r\n0 4:1\n \t\r\n\n", Format::Libsvm) == 2);
  CHECK(count("\n1 0:3:1\n\t\n0 1:4:1\n\n", Format::Libfm) == 2);
  CHECK(s.label == 0.0f);
  CHECK(count("id,click,hour,C1\n1,0,14102100,a\n\r\n  \n2,1,14102101,b\n\n", Format::Avazu) == 2);
  CHECK(s.label == 1.0f);
  CHECK(count("\n" + avazu_line("1", "14102100") + "\n", Format::Avazu) == 1);  // Kaggle layout
  // Criteo: a blank line is skipped too.
  Fixture c(std::string("\n") + "1" + std::string(13, '\t') + std::string(26, '\t') + "\n \r\n");
  CriteoReader cr(c.str(), true);
  Sample cs;
  CHECK(cr.next(cs));
  CHECK_FALSE(cr.next(cs));
  CHECK(cr.malformed().count == 0);
}

TEST_CASE("file data: the --data split is of the data lines (blank lines not counted)") {
  // 8 data lines (labels 1,0,1,0,...; feature 3 + i) with blank lines between: 25 % is the
  // last 2 data lines, lines 10 and 12.
  std::string content = "\n";
  for (int i = 0; i < 8; ++i)
    content +=
        std::to_string(i % 2 == 0 ? 1 : 0) + " " + std::to_string(3 + i) + ":1\n" + (i % 3 == 0 ? " \n" : "");
  Fixture f(content);  // data lines 2, 4, 5, 6, 8, 9, 10, 12; blank lines 1, 3, 7, 11
  FileDataOptions o;
  o.format = Format::Libsvm;
  o.data = f.str();
  o.test_fraction = 0.25;
  o.strict = true;
  const DataSetup d = make_file_data(o);
  CHECK(d.train_size == 6);
  CHECK(d.test_size == 2);
  CHECK(contains(d.description, "lines 1-9 train, 10-12 test"));
  CHECK(d.table_rows == std::vector<std::int64_t>{7});  // features 3..8 + the missing row
  // Only blank lines: no data line to split.
  Fixture blank("\n \n\t\r\n");
  o.data = blank.str();
  CHECK_THROWS_WITH_AS(make_file_data(o), doctest::Contains("has 0 data lines: too few to split"), DataError);
  Fixture empty("");
  o.data = empty.str();
  CHECK_THROWS_WITH_AS(make_file_data(o), doctest::Contains("has 0 data lines: too few to split"), DataError);
}

TEST_CASE(
    "messages: control bytes of a token are escaped (a NUL neither cuts the message nor is printed raw)") {
  CHECK(quote_token(std::string_view("a\0b", 3)) == "'a\\x00b'");
  CHECK(quote_token("x\x1b[2J\x7f\\") == "'x\\x1b[2J\\x7f\\\\'");
  CHECK(quote_token(std::string(41, 'z')) == "'" + std::string(40, 'z') + "...'");
  CtrSample s;
  std::vector<std::string_view> tok;
  CHECK(parse_libsvm_line(std::string_view("1 4:\0x", 6), LibsvmFields{}, s, tok) ==
        "token 2 '4:\\x00x': value is not a finite number");
  CHECK(parse_libfm_line("1 0:\x01:1", 3, s, tok) ==
        "token 2 '0:\\x01:1': feature is not a non-negative integer");
  CHECK(parse_libsvm_line(std::string_view("\0 1:1", 5), LibsvmFields{}, s, tok) ==
        "label must be 0 or 1 (or -1/+1), got '\\x00'");
  Sample cs;
  CHECK(parse_criteo_line("\x02" + std::string(39, '\t'), cs) == "label must be 0 or 1, got '\\x02'");
  // Under --strict the whole message reaches what(): the text after the NUL is there.
  Fixture f(std::string("1 3:1\n0 5:\0\n", 12));
  CtrReader strict(f.str(), CtrSpec{Format::Libsvm, {}, kMaxCtrTables}, true);
  REQUIRE(strict.next(s));
  const std::string why = f.str() + ": line 2: token 2 '5:\\x00': value is not a finite number";
  CHECK_THROWS_WITH_AS(strict.next(s), why.c_str(), MalformedLine);
}

TEST_CASE("reader: a UTF-8 byte order mark is dropped; Avazu's header names id and click in any case") {
  CtrSample s;
  Fixture svm(
      "\xEF\xBB\xBF"
      "1 3:1\n0 4:1\n");
  CtrReader r(svm.str(), CtrSpec{Format::Libsvm, {}, kMaxCtrTables}, true);
  REQUIRE(r.next(s));
  CHECK(s.label == 1.0f);
  CHECK(s.feats.at(0).key == 3);
  Fixture az(
      "\xEF\xBB\xBF"
      "ID,Click,HOUR,C1\n7,1,14102105,a\n");
  CtrReader a(az.str(), CtrSpec{Format::Avazu, {}, kMaxCtrTables}, true);
  CHECK(a.has_header());
  CHECK(a.tables() == 2);
  CHECK(a.layout().label_col == 1);
  CHECK(a.layout().hour_col == 2);
  REQUIRE(a.next(s));
  CHECK(s.label == 1.0f);
  CHECK(s.feats.at(0).key == 5);  // hour of day
  CHECK_FALSE(a.next(s));
  CHECK(is_avazu_header("Id,click"));
  CHECK_FALSE(is_avazu_header("ids,click"));
  Fixture criteo(
      "\xEF\xBB\xBF"
      "1" +
      std::string(39, '\t') + "\n");
  CriteoReader cr(criteo.str(), true);
  Sample cs;
  CHECK(cr.next(cs));
}

TEST_CASE("file data: an empty libfm training file is refused before the test file is read") {
  Fixture train("\n");
  Fixture test("1 0:x:1\n");  // malformed: under --strict, reading it first would throw MalformedLine
  FileDataOptions o;
  o.format = Format::Libfm;
  o.train = train.str();
  o.test = test.str();
  o.strict = true;
  const std::string why = "no valid training lines in '" + train.str() + "'";
  CHECK_THROWS_WITH_AS(make_file_data(o), why.c_str(), DataError);
  o.format = Format::Libsvm;
  CHECK_THROWS_WITH_AS(make_file_data(o), why.c_str(), DataError);
}
