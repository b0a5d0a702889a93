// SPDX-License-Identifier: Apache-2.0
// Checkpoint format, verification and atomicity: CRC-32C known answers, an independent
// parser of the documented layout, every single-bit flip and every truncation rejected with
// the object unchanged, interrupted saves leaving the previous file intact.
#include <sys/stat.h>

#include <cerrno>
#include <mpe/io/checkpoint_format.hpp>
#include <stdexcept>
#include <system_error>

#include "io/checkpoint_common.hpp"

namespace {

using E4 = mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<2>, mpe::StochasticRounding>;
using E8 = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lfu<2>, mpe::StochasticRounding>;

mpe::EmbeddingConfig tiny_config(std::uint64_t seed = 3) {
  mpe::EmbeddingConfig c;
  c.table_rows = {7, 5};
  c.dim = 3;
  c.cache_rows = 4;
  c.seed = seed;
  return c;
}

template <class E>
E trained(const mpe::EmbeddingConfig& c, std::uint64_t steps, std::uint64_t first = 0) {
  E e(c);
  e.init_uniform(-1.0f, 1.0f);
  for (std::uint64_t k = first; k < first + steps; ++k) ckt::train_step(e, k, mpe::RowwiseAdagrad{0.1f}, 3);
  return e;
}

// ---- an independent reader of the layout documented in checkpoint_format.hpp ----
struct Le {
  const std::vector<std::uint8_t>& b;
  std::size_t p = 0;
  template <class T>
  T get() {
    REQUIRE(p + sizeof(T) <= b.size());
    T x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      using U = std::make_unsigned_t<T>;
      x = static_cast<T>(static_cast<U>(x) | static_cast<U>(static_cast<U>(b[p + i]) << (8 * i)));
    }
    p += sizeof(T);
    return x;
  }
  std::string str() {
    const auto n = get<std::uint16_t>();
    std::string s(b.begin() + static_cast<long>(p), b.begin() + static_cast<long>(p + n));
    p += n;
    return s;
  }
};

struct Parsed {
  std::string storage, cache, rounding;
  std::uint32_t ways = 0, T = 0, opt_kind = 0, state_floats = 0, n_stats = 0;
  std::string opt_name, state_precision;
  std::vector<std::int64_t> table_rows;
  std::int32_t dim = 0, align = 0;
  std::uint64_t stride = 0, seed = 0, step = 0, populate = 0, sketch_inc = 0, calls = 0;
  std::int64_t sets = 0, slots = 0, width = 0;
  std::vector<std::uint64_t> stats;
  std::size_t header_bytes = 0;
  std::uint32_t version = 0;
  std::vector<std::string> names;
  std::vector<std::size_t> payload_at, payload_len;
};

// Plain bitwise CRC-32C (RFC 3720 B.4 definition), independent of the slicing-by-8 one.
std::uint32_t crc_ref(const std::uint8_t* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

Parsed parse(const std::vector<std::uint8_t>& b) {
  Parsed r;
  Le in{b};
  REQUIRE(std::string(b.begin(), b.begin() + 8) == "MPECKPT1");
  in.p = 8;
  r.version = in.get<std::uint32_t>();
  CHECK((r.version >= 1u && r.version <= 4u));
  const int n_sections = r.version == 1u ? 7 : r.version == 2u ? 8 : 9;
  r.header_bytes = in.get<std::uint32_t>();
  r.storage = in.str();
  r.cache = in.str();
  r.ways = in.get<std::uint32_t>();
  r.rounding = in.str();
  r.T = in.get<std::uint32_t>();
  for (std::uint32_t t = 0; t < r.T; ++t) r.table_rows.push_back(in.get<std::int64_t>());
  r.dim = in.get<std::int32_t>();
  r.align = in.get<std::int32_t>();
  r.stride = in.get<std::uint64_t>();
  r.sets = in.get<std::int64_t>();
  r.slots = in.get<std::int64_t>();
  r.width = in.get<std::int64_t>();
  r.seed = in.get<std::uint64_t>();
  r.step = in.get<std::uint64_t>();
  r.populate = in.get<std::uint64_t>();
  r.sketch_inc = in.get<std::uint64_t>();
  if (r.version == 1u) {
    r.opt_kind = in.get<std::uint32_t>();
  } else {
    r.opt_name = in.str();
  }
  r.state_floats = in.get<std::uint32_t>();
  if (r.version >= 3u) r.state_precision = in.str();
  r.n_stats = in.get<std::uint32_t>();
  for (std::uint32_t i = 0; i < r.n_stats; ++i) r.stats.push_back(in.get<std::uint64_t>());
  if (r.version >= 4u) r.calls = in.get<std::uint64_t>();
  CHECK(in.get<std::uint32_t>() == static_cast<std::uint32_t>(n_sections));
  CHECK(in.p + 4 == r.header_bytes);
  CHECK(in.get<std::uint32_t>() == crc_ref(b.data(), r.header_bytes - 4));
  for (int i = 0; i < n_sections; ++i) {
    r.names.push_back(in.str());
    const auto len = static_cast<std::size_t>(in.get<std::uint64_t>());
    r.payload_at.push_back(in.p);
    r.payload_len.push_back(len);
    in.p += len;
    CHECK(in.get<std::uint32_t>() == crc_ref(b.data() + r.payload_at.back(), len));
  }
  CHECK(std::string(b.begin() + static_cast<long>(in.p), b.begin() + static_cast<long>(in.p + 8)) ==
        "MPECKEND");
  in.p += 8;
  CHECK(in.get<std::uint64_t>() == b.size());
  CHECK(in.get<std::uint32_t>() == crc_ref(b.data(), b.size() - 4));
  CHECK(in.p == b.size());
  return r;
}

// Recomputes every checksum of a (modified) checkpoint, so a semantic check is reached.
void restamp(std::vector<std::uint8_t>& b, const Parsed& r) {
  auto put32 = [&](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(v >> (8 * i));
  };
  put32(r.header_bytes - 4, crc_ref(b.data(), r.header_bytes - 4));
  for (std::size_t i = 0; i < r.names.size(); ++i) {
    put32(r.payload_at[static_cast<std::size_t>(i)] + r.payload_len[static_cast<std::size_t>(i)],
          crc_ref(b.data() + r.payload_at[static_cast<std::size_t>(i)],
                  r.payload_len[static_cast<std::size_t>(i)]));
  }
  put32(b.size() - 4, crc_ref(b.data(), b.size() - 4));
}

template <class E>
std::string load_error(E& e, const std::vector<std::uint8_t>& bytes) {
  try {
    mpe::io::load_from_bytes(e, bytes, "mem");
  } catch (const mpe::checkpoint_error& x) {
    return x.what();
  }
  return "";
}

}  // namespace

TEST_CASE("crc32c matches the RFC 3720 (B.4) check values") {
  using mpe::io::checkpoint::crc32c;
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  std::vector<std::uint8_t> z(32, 0), f(32, 0xff), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
    dec[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(31 - i);
  }
  CHECK(crc32c(z.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(f.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(inc.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(dec.data(), 32) == 0x113FDB5Cu);
  // streaming equals one shot, at every split
  std::vector<std::uint8_t> big(1000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 131 + 7);
  for (std::size_t cut : {0u, 1u, 7u, 8u, 9u, 500u, 999u, 1000u}) {
    CHECK(crc32c(big.data() + cut, 1000 - cut, crc32c(big.data(), cut)) == crc_ref(big.data(), 1000));
  }
}

TEST_CASE("checkpoint file follows the documented layout") {
  const auto dir = ckt::temp_dir("layout");
  const auto c = tiny_config();
  E4 e = trained<E4>(c, 5);
  e.save(dir / "a.ckpt");
  const auto b = ckt::read_bytes(dir / "a.ckpt");
  const Parsed r = parse(b);
  CHECK(r.storage == "int4_rowwise");
  CHECK(r.cache == "lfu");
  CHECK(r.ways == 2u);
  CHECK(r.rounding == "stochastic");
  CHECK(r.table_rows == std::vector<std::int64_t>{7, 5});
  CHECK(r.dim == 3);
  CHECK(r.align == 4);
  CHECK(r.stride == 8u);  // ceil(3/2) + 4 = 6 bytes rounded up to row_alignment 4
  CHECK(r.slots == 4);
  CHECK(r.sets == 2);
  // policy_words: the LFU sketch's 4 lines of width 16 (the smallest power of two >= 16
  // and >= 2 * slots)
  CHECK(r.width == 4 * 16);
  CHECK(r.seed == 3u);
  CHECK(r.step == 5u);
  CHECK(r.opt_name == "rowwise_adagrad");
  CHECK(r.state_floats == 1u);
  REQUIRE(r.n_stats == 12u);
  const auto s = e.stats();
  CHECK(r.stats[0] == s.lookups);
  CHECK(r.stats[2] == s.hits);
  CHECK(r.stats[11] == s.skipped_steps);
  CHECK(r.version == 4u);
  CHECK(r.state_precision == "fp32");
  // calls: 5 forward() and 5 backward() calls, and the prefetch() of steps 0 and 3
  CHECK(r.calls == 12u);
  CHECK(r.populate <= r.calls);
  CHECK(r.names == std::vector<std::string>{"store", "cache_rows", "tags", "last_use", "dirty", "lfu",
                                            "optimizer", "pending_batch", "optimizer_cache"});
  // optimizer_cache is empty: FP32 state keeps no copy beside the cached rows
  CHECK(r.payload_len ==
        std::vector<std::size_t>{12 * 8, 4 * 3 * 4, 4 * 8, 4 * 8, 4, 4 * 16 * 4, 12 * 4, 0, 0});
  // The store section holds the rows as Int4Rowwise bytes: decode row 0 by hand.
  std::vector<float> w(12 * 3);
  e.get_weights(w);
  const std::uint8_t* row = b.data() + r.payload_at[0];
  const float scale = mpe::num::half_to_float(static_cast<std::uint16_t>(row[2] | row[3] << 8));
  const float bias = mpe::num::half_to_float(static_cast<std::uint16_t>(row[4] | row[5] << 8));
  bool row0_cached = false;
  for (int slot = 0; slot < 4; ++slot) {
    std::int64_t tag;
    std::memcpy(&tag, b.data() + r.payload_at[2] + 8 * static_cast<std::size_t>(slot), 8);
    row0_cached = row0_cached || tag == 0;
  }
  if (!row0_cached) {
    CHECK(w[0] == scale * static_cast<float>(row[0] & 0xf) + bias);
    CHECK(w[1] == scale * static_cast<float>(row[0] >> 4) + bias);
    CHECK(w[2] == scale * static_cast<float>(row[1] & 0xf) + bias);
  }
}

TEST_CASE("load rejects every single-bit flip, every truncation and trailing bytes; object unchanged") {
  const auto dir = ckt::temp_dir("corrupt");
  const auto c = tiny_config();
  E4 src = trained<E4>(c, 6);
  src.save(dir / "good.ckpt");
  const auto good = ckt::read_bytes(dir / "good.ckpt");
  E4 dst = trained<E4>(c, 4, 100);  // a different state, to see that nothing changes
  const auto before = ckt::snapshot(dst);
  const auto w_before = ckt::weights(dst);
  INFO("checkpoint bytes: ", good.size());
  std::size_t rejected = 0, tested = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = good;
      bad[i] ^= static_cast<std::uint8_t>(1u << bit);
      ++tested;
      if (!load_error(dst, bad).empty()) ++rejected;
    }
  }
  CHECK(rejected == tested);
  std::size_t trunc_rejected = 0;
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    if (!load_error(dst, cut).empty()) ++trunc_rejected;
  }
  CHECK(trunc_rejected == good.size());
  auto longer = good;
  longer.push_back(0);
  CHECK(load_error(dst, longer).find("1 trailing bytes") != std::string::npos);
  CHECK(ckt::snapshot(dst) == before);
  CHECK(ckt::same_bits(ckt::weights(dst), w_before));
  // The intact file still loads into the same object afterwards.
  dst.load(dir / "good.ckpt");
  CHECK(ckt::snapshot(dst) == ckt::snapshot(src));
}

TEST_CASE("an int2_rowwise checkpoint resumes exactly; other store formats refuse it and it refuses theirs") {
  using E2 = mpe::CachedEmbedding<mpe::Int2Rowwise, mpe::Lfu<2>, mpe::StochasticRounding>;
  const auto dir = ckt::temp_dir("int2");
  ckt::check_resume<mpe::CachedEmbedding<mpe::Int2Rowwise, mpe::Lru<4>, mpe::StochasticRounding>>(dir);
  const auto c = tiny_config();
  E2 src = trained<E2>(c, 4);
  src.save(dir / "int2.ckpt");
  const auto b2 = ckt::read_bytes(dir / "int2.ckpt");
  const Parsed r = parse(b2);
  CHECK(r.storage == "int2_rowwise");
  CHECK(r.stride == 8u);  // ceil(3/4) + 4 = 5 bytes rounded up to row_alignment 4
  E2 dst(c);
  dst.load(dir / "int2.ckpt");
  CHECK(ckt::snapshot(dst) == ckt::snapshot(src));
  E4 four(c);
  const auto before = ckt::snapshot(four);
  CHECK(load_error(four, b2).find("storage 'int2_rowwise' in file, 'int4_rowwise' here") !=
        std::string::npos);
  CHECK(ckt::snapshot(four) == before);
  E4 src4 = trained<E4>(c, 2);
  src4.save(dir / "int4.ckpt");
  const auto dst_before = ckt::snapshot(dst);
  CHECK(load_error(dst, ckt::read_bytes(dir / "int4.ckpt"))
            .find("storage 'int4_rowwise' in file, 'int2_rowwise' here") != std::string::npos);
  CHECK(ckt::snapshot(dst) == dst_before);
}

TEST_CASE("load names what is wrong") {
  const auto dir = ckt::temp_dir("messages");
  const auto c = tiny_config();
  E4 src = trained<E4>(c, 3);
  src.save(dir / "a.ckpt");
  const auto good = ckt::read_bytes(dir / "a.ckpt");
  const Parsed r = parse(good);

  E8 other(c);
  CHECK(load_error(other, good).find("storage 'int4_rowwise' in file, 'int8_rowwise' here") !=
        std::string::npos);
  auto c2 = c;
  c2.dim = 4;
  E4 wrong_dim(c2);
  CHECK(load_error(wrong_dim, good).find("dim 3 in file, 4 here") != std::string::npos);
  auto c3 = c;
  c3.table_rows = {7, 6};
  E4 wrong_rows(c3);
  CHECK(load_error(wrong_rows, good).find("table_rows[1] = 5 in file, 6 here") != std::string::npos);
  mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lru<2>, mpe::StochasticRounding> lru(c);
  CHECK(load_error(lru, good).find("cache policy 'lfu' in file, 'lru' here") != std::string::npos);
  mpe::CachedEmbedding<mpe::Int4Rowwise, mpe::Lfu<2>, mpe::NearestRounding> nearest(c);
  CHECK(load_error(nearest, good).find("rounding 'stochastic' in file, 'nearest' here") != std::string::npos);

  E4 dst(c);
  auto bad = good;
  bad[r.payload_at[0] + 3] ^= 0x10;
  CHECK(load_error(dst, bad).find("section 'store' checksum mismatch") != std::string::npos);
  bad = good;
  bad[20] ^= 1;  // inside the storage name
  CHECK(load_error(dst, bad).find("header checksum mismatch") != std::string::npos);
  const std::vector<std::uint8_t> cut(good.begin(), good.begin() + static_cast<long>(r.payload_at[1] + 5));
  CHECK(load_error(dst, cut).find("truncated at byte " + std::to_string(cut.size())) != std::string::npos);
  bad = good;
  bad[0] = 'X';
  CHECK(load_error(dst, bad).find("bad magic") != std::string::npos);

  // Valid checksums but inconsistent cache metadata: a tag outside the table, a tag in
  // the wrong set, a dirty flag on an empty slot.
  auto set_tag = [&](std::vector<std::uint8_t>& b, int slot, std::int64_t tag) {
    std::memcpy(b.data() + r.payload_at[2] + 8 * static_cast<std::size_t>(slot), &tag, 8);
  };
  bad = good;
  set_tag(bad, 0, 12);
  restamp(bad, r);
  CHECK(load_error(dst, bad).find("tags: slot 0 holds row 12, outside [-1, 12)") != std::string::npos);
  for (std::int64_t row = 0; row < 12; ++row) {
    if (mpe::set_of_row(row, 2) == 1) {
      bad = good;
      set_tag(bad, 0, row);
      restamp(bad, r);
      CHECK(load_error(dst, bad).find("which belongs to set 1") != std::string::npos);
      break;
    }
  }
  bad = good;
  set_tag(bad, 1, -1);
  bad[r.payload_at[4] + 1] = 1;
  restamp(bad, r);
  CHECK(load_error(dst, bad).find("dirty: slot 1 has dirty = 1 but is empty") != std::string::npos);

  // A missing file names the path.
  try {
    dst.load(dir / "missing.ckpt");
    FAIL("no exception");
  } catch (const mpe::checkpoint_error& x) {
    CHECK(std::string(x.what()).find("missing.ckpt") != std::string::npos);
  }
}

TEST_CASE("an interrupted save leaves the previous checkpoint intact and loadable") {
  const auto dir = ckt::temp_dir("interrupted");
  const auto path = dir / "model.ckpt";
  const auto c = tiny_config();
  E4 e = trained<E4>(c, 4);
  e.save(path);
  const auto v1 = ckt::read_bytes(path);
  const auto v1_state = ckt::snapshot(e);
  ckt::train_step(e, 50, mpe::RowwiseAdagrad{0.1f}, 3);
  const auto v2_state = ckt::snapshot(e);
  REQUIRE(v1_state != v2_state);

  // Count the operations of a successful save.
  std::vector<mpe::detail::CheckpointIoOp> ops;
  mpe::detail::checkpoint_io_hook = [&](mpe::detail::CheckpointIoOp op, std::size_t) { ops.push_back(op); };
  e.save(dir / "count.ckpt");
  mpe::detail::checkpoint_io_hook = nullptr;
  REQUIRE(ops.size() >= 5);  // open, writes, fsync, rename, directory fsync
  CHECK(ops.front() == mpe::detail::CheckpointIoOp::Open);
  CHECK(ops.back() == mpe::detail::CheckpointIoOp::DirFsync);

  struct Injected : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  for (std::size_t k = 0; k < ops.size(); ++k) {
    CAPTURE(k);
    mpe::detail::checkpoint_io_hook = [k](mpe::detail::CheckpointIoOp, std::size_t i) {
      if (i == k) throw Injected("injected fault");
    };
    CHECK_THROWS_AS(e.save(path), Injected);
    mpe::detail::checkpoint_io_hook = nullptr;
    // Only the model file (and count.ckpt) remain: the temporary file is gone.
    std::size_t files = 0;
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      (void)f;
      ++files;
    }
    CHECK(files == 2);
    E4 check(c);
    check.load(path);
    if (ops[k] == mpe::detail::CheckpointIoOp::DirFsync) {
      // The directory fsync is the last step: the rename already put the new, complete
      // file in place, and save() still reports the failure.
      CHECK(ckt::snapshot(check) == v2_state);
    } else {
      CHECK(ckt::read_bytes(path) == v1);
      CHECK(ckt::snapshot(check) == v1_state);
    }
  }

  // A real I/O failure: the directory does not exist. std::system_error naming the path.
  try {
    e.save(dir / "no_such_dir" / "x.ckpt");
    FAIL("no exception");
  } catch (const std::system_error& x) {
    CHECK(std::string(x.what()).find("no_such_dir") != std::string::npos);
  }
}

TEST_CASE("save refuses an empty path and a target that is not a regular file, writing nothing") {
  const auto dir = ckt::temp_dir("targets");
  const auto c = tiny_config();
  E4 e = trained<E4>(c, 2);
  const auto real = dir / "real.ckpt";
  e.save(real);
  const auto before = ckt::read_bytes(real);
  const auto link = dir / "link.ckpt";
  std::filesystem::create_symlink(real, link);
  const auto fifo = dir / "fifo.ckpt";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const auto sub = dir / "sub";
  std::filesystem::create_directory(sub);
  auto refused = [&](const std::filesystem::path& p, const std::string& kind) {
    CAPTURE(p);
    try {
      e.save(p);
      FAIL("no exception");
    } catch (const std::system_error& x) {
      const std::string m = x.what();
      CHECK(x.code().value() == EINVAL);
      CHECK(m.find("'" + p.string() + "'") != std::string::npos);
      CHECK(m.find(kind) != std::string::npos);
    }
  };
  refused(link, "is a symbolic link, not a regular file");
  refused(fifo, "is a FIFO, not a regular file");
  refused(sub, "is a directory, not a regular file");
  refused("", "the path is empty");
  // Nothing was written or replaced: the link, the FIFO and the directory are as they were,
  // the link's target holds the earlier checkpoint and no temporary file is left.
  CHECK(std::filesystem::is_symlink(link));
  CHECK(std::filesystem::is_fifo(std::filesystem::symlink_status(fifo)));
  CHECK(std::filesystem::is_directory(sub));
  CHECK(ckt::read_bytes(real) == before);
  std::size_t entries = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    (void)f;
    ++entries;
  }
  CHECK(entries == 4);  // real.ckpt, link.ckpt, fifo.ckpt, sub
}

TEST_CASE("a batch awaiting backward is not saved: after load the next call must be forward") {
  const auto dir = ckt::temp_dir("pending");
  const auto c = tiny_config();
  E4 a = trained<E4>(c, 2);
  const auto b = ckt::make_batch(c, 3, 9);
  std::vector<float> out(b.grad.size());
  a.forward(b.indices, b.offsets, out);
  a.save(dir / "p.ckpt");
  E4 r(c);
  r.load(dir / "p.ckpt");
  CHECK_THROWS_AS(r.backward(b.grad, mpe::RowwiseAdagrad{0.1f}), std::logic_error);
  a.backward(b.grad, mpe::RowwiseAdagrad{0.1f});  // the saver itself is unaffected
  CHECK(ckt::same_bits(ckt::weights(r), ckt::weights(trained<E4>(c, 2))));
  r.forward(b.indices, b.offsets, out);
  r.backward(b.grad, mpe::RowwiseAdagrad{0.1f});
  CHECK(r.step() == 3);
}

TEST_CASE("no cache, and no optimizer state yet, round-trip too") {
  const auto dir = ckt::temp_dir("nocache");
  auto c = tiny_config();
  c.cache_rows = 0;
  mpe::CachedEmbedding<mpe::Fp16, mpe::Lru<4>, mpe::NearestRounding> a(c), b(c);
  a.init_uniform(-2.0f, 2.0f);
  a.save(dir / "n.ckpt");
  b.init_uniform(0.5f, 1.0f);
  ckt::train_step(b, 1, mpe::RowwiseAdagrad{0.1f}, 3);  // b has optimizer state; the file has none
  b.load(dir / "n.ckpt");
  CHECK(b.memory().optimizer_bytes == 0);
  CHECK(ckt::snapshot(a) == ckt::snapshot(b));
  ckt::train_step(a, 2, mpe::Sgd{0.1f}, 3);  // the kind is free again after load
  ckt::train_step(b, 2, mpe::Sgd{0.1f}, 3);
  CHECK(ckt::same_bits(ckt::weights(a), ckt::weights(b)));
}
