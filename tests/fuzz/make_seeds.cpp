// SPDX-License-Identifier: Apache-2.0
// Writes the checkpoint fuzzer's seed corpus: valid checkpoints (format version 4) of the
// three fuzzed embeddings after 0, 1, 3 and 7 training steps, and after 7 steps with a
// prefetch pending. Usage: fuzz_checkpoint_seeds <dir>
#include <cstdio>
#include <filesystem>
#include <string>

#include "fuzz_common.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  mpe_fuzz::Lfu4 a(mpe_fuzz::config(true));
  mpe_fuzz::NoCache8 b(mpe_fuzz::config(false));
  mpe_fuzz::Lfu4Bf16 c(mpe_fuzz::config(true));
  a.init_uniform(-1.0f, 1.0f);
  b.init_uniform(-1.0f, 1.0f);
  c.init_uniform(-1.0f, 1.0f);
  int done = 0;
  for (int target : {0, 1, 3, 7}) {
    for (; done < target; ++done) {
      mpe_fuzz::step(a, done);
      mpe_fuzz::step(b, done);
      mpe_fuzz::step(c, done);
    }
    a.save(dir / ("lfu4_step" + std::to_string(target) + ".ckpt"));
    b.save(dir / ("nocache8_step" + std::to_string(target) + ".ckpt"));
    c.save(dir / ("lfu4bf16_step" + std::to_string(target) + ".ckpt"));
  }
  // With a prefetch pending (the pending_batch section non-empty).
  const std::int64_t idx[] = {1, 4, 0, 2, 2};
  const std::int64_t off[] = {0, 2, 3, 4, 5};
  a.prefetch(idx, off);
  b.prefetch(idx, off);
  c.prefetch(idx, off);
  a.save(dir / "lfu4_pending.ckpt");
  b.save(dir / "nocache8_pending.ckpt");
  c.save(dir / "lfu4bf16_pending.ckpt");
  return 0;
}
