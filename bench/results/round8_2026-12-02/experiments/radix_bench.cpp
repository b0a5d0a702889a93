#include <chrono>
#include <cstdio>
#include <random>
#include <algorithm>
#include "/tmp/old_radix.hpp"
#include "mpe/detail/radix_sort.hpp"
int main() {
  for (std::size_t n : {21644ul, 63428ul}) {
    std::mt19937_64 g(1);
    std::vector<std::uint64_t> k0(n); std::vector<long> v0(n);
    for (std::size_t i = 0; i < n; ++i) { k0[i] = (g() % 1562) << 32 | 0xffffffffull; v0[i] = (long)i; }
    for (int rep = 0; rep < 3; ++rep)
    for (int which = 0; which < 2; ++which) {
      std::vector<double> t;
      for (int it = 0; it < 200; ++it) {
        auto k = k0; auto v = v0;
        auto a = std::chrono::steady_clock::now();
        if (which == 0) oldr::radix_sort_pairs(k.data(), v.data(), n, 43); else mpe::detail::radix_sort_pairs(k.data(), v.data(), n, 43);
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
      }
      std::sort(t.begin(), t.end());
      std::printf("n=%zu %s median %.1f us\n", n, which ? "new" : "old", t[t.size()/2]);
    }
  }
}
