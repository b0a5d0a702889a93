// Standalone timing of SetVictims::take: 1562 sets x 32 ways, realistic LRU state, 8.5 misses/set.
#include <cstdio>
#include <random>
#include <vector>
#include <x86intrin.h>
#include "mpe/cache/detail/admission.hpp"
#include "mpe/cache/policies.hpp"
using P = mpe::Lru<32>;
int main() {
  const std::int64_t sets = 1562, ways = 32, slots = sets * ways;
  std::vector<std::int64_t> tags(slots);
  std::vector<std::uint64_t> lu(slots);
  std::vector<std::uint8_t> dirty(slots, 0);
  std::mt19937_64 g(1);
  for (std::int64_t s = 0; s < slots; ++s) { tags[s] = static_cast<std::int64_t>(g() % 1000000); lu[s] = 1000 + g() % 200; }
  // ~5 ways per set used by this batch (locked)
  const std::uint64_t batch = 1300, floor = 1300;
  for (std::int64_t st = 0; st < sets; ++st) for (int k = 0; k < 5; ++k) lu[st * ways + g() % ways] = batch;
  mpe::CacheRef c; c.tags = tags.data(); c.last_use = lu.data(); c.dirty = dirty.data(); c.num_sets = sets; c.ways = 32; c.dim = 64;
  std::vector<int> misses(sets); for (auto& m : misses) m = 4 + static_cast<int>(g() % 10);
  std::int64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = __rdtsc();
    for (int r = 0; r < 10; ++r)
      for (std::int64_t st = 0; st < sets; ++st) {
        mpe::detail::SetVictims<P> v;
        for (int m = 0; m < misses[st]; ++m) sink += v.take(P::View{}, c, st * ways, floor, 0).slot;
      }
    const auto t1 = __rdtsc();
    std::printf("cycles per set %.0f (sink %lld)\n", double(t1 - t0) / (10.0 * sets), (long long)sink);
  }
}
