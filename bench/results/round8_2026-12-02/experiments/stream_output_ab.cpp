#include <chrono>
#include <cstdio>
#include <fstream>
#include <vector>
#include <algorithm>
#include "mpe/mpe.hpp"
int main() {
  std::ifstream f("/tmp/batches.bin", std::ios::binary);
  std::int64_t hdr[2]; f.read((char*)hdr, 16);
  std::vector<std::int64_t> rows(hdr[0]); f.read((char*)rows.data(), 8 * hdr[0]);
  struct Bt { std::vector<std::int64_t> idx, off; };
  std::vector<Bt> bs(hdr[1]);
  for (auto& b : bs) { std::int64_t n[2]; f.read((char*)n, 16); b.idx.resize(n[0]); b.off.resize(n[1]);
    f.read((char*)b.idx.data(), 8 * n[0]); f.read((char*)b.off.data(), 8 * n[1]); }
  mpe::EmbeddingConfig cfg; cfg.table_rows = rows; cfg.dim = 64; cfg.cache_rows = 0; cfg.seed = 1;
  mpe::CachedEmbedding<mpe::Fp32, mpe::Lru<32>, mpe::StochasticRounding> e(cfg, mpe::HostBackend{.num_threads = 1});
  e.init_uniform(-0.05f, 0.05f);
  std::vector<float> out(2048 * rows.size() * 64), grad(out.size(), 1e-3f);
  double t[2] = {0, 0}, tc[2] = {0, 0}; int cnt[2] = {0, 0}; double sink = 0;
  for (int round = 0; round < 8; ++round)
    for (std::size_t k = 0; k < bs.size(); ++k) {
      const int mode = (k + round) % 2;
      mpe::g_exp_stream = mode == 1;
      auto a = std::chrono::steady_clock::now();
      e.forward(bs[k].idx, bs[k].off, out);
      auto b = std::chrono::steady_clock::now();
      float s = 0; for (std::size_t i = 0; i < out.size(); i += 1) s += out[i];   // the consumer reads it all
      auto c = std::chrono::steady_clock::now();
      e.backward(grad, mpe::Sgd{0.0f});
      sink += s;
      if (round > 0) { t[mode] += std::chrono::duration<double, std::milli>(b - a).count(); tc[mode] += std::chrono::duration<double, std::milli>(c - a).count(); cnt[mode]++; }
    }
  std::printf("forward ms: plain %.3f stream %.3f | forward+read: plain %.3f stream %.3f (%d calls each) %g\n", t[0]/cnt[0], t[1]/cnt[1], tc[0]/cnt[0], tc[1]/cnt[1], cnt[0], sink);
}
