// SPDX-License-Identifier: Apache-2.0
// Host-backend programs under -fsanitize=address,undefined (#40 item 6): repeated
// construct / train / destroy loops on 1 and 2 threads, ways beyond the rows (a set larger
// than the table), an index out of range (refused), an empty batch, a compact-state
// optimizer, flush and a checkpoint round trip. Any sanitizer report aborts the program
// (-fno-sanitize-recover=all); the values are checked against the 1-thread run.
#include <doctest/doctest.h>

#include <cstring>
#include <mpe/mpe.hpp>
#include <stdexcept>
#include <vector>

namespace {

template <class E>
std::vector<float> train(int threads, std::int64_t cache_rows) {
  mpe::EmbeddingConfig c;
  c.table_rows = {3, 50};
  c.dim = 8;
  c.cache_rows = cache_rows;
  c.seed = 1;
  E e(c, mpe::HostBackend{threads});
  e.init_uniform(-0.1f, 0.1f);
  const std::vector<std::int64_t> idx{0, 2, 1, 49, 7, 7}, off{0, 2, 3, 5, 6};
  std::vector<float> out(2 * 2 * 8), g(out.size(), 0.1f);
  for (int k = 0; k < 3; ++k) {
    e.forward(idx, off, out);
    e.backward(g, mpe::Adam{0.01f});
  }
  const std::vector<std::int64_t> bad{0, 99, 1, 49, 7, 7};
  CHECK_THROWS_AS(e.forward(bad, off, out), std::invalid_argument);
  const std::vector<std::int64_t> none, empty_off{0, 0, 0, 0, 0};
  e.forward(none, empty_off, out);
  e.backward(g, mpe::Adam{0.01f});
  e.flush();
  E f(c, mpe::HostBackend{threads});
  mpe::io::load_from_bytes(f, mpe::io::save_to_bytes(e));
  std::vector<float> w(static_cast<std::size_t>(f.total_rows()) * 8);
  f.get_weights(w);
  return w;
}

}  // namespace

TEST_CASE("host backend under ASan/UBSan: construct/train/destroy loops, 1 and 2 threads, same bits") {
  using E = mpe::CachedEmbedding<mpe::Int8Rowwise, mpe::Lru<64>, mpe::StochasticRounding, mpe::HostBackend,
                                 mpe::StateBf16>;
  for (int rep = 0; rep < 3; ++rep)
    for (const std::int64_t cache_rows : {std::int64_t{0}, std::int64_t{64}}) {
      const std::vector<float> one = train<E>(1, cache_rows), two = train<E>(2, cache_rows);
      CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
    }
}
