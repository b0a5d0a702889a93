// Deterministic hashing and random numbers shared by the reader, the synthetic
// generator and the model initialisation. Everything is a pure function of its
// inputs, so results do not depend on the thread count or the platform's
// <random> implementation.
#pragma once

#include <cmath>
#include <cstdint>

namespace dlrm {

inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// One splitmix64 step (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr std::uint64_t hash_combine(std::uint64_t a, std::uint64_t b) noexcept {
  return splitmix64(a ^ splitmix64(b));
}

// Uniform double in [0, 1) from the top 53 bits.
constexpr double unit_double(std::uint64_t x) noexcept { return static_cast<double>(x >> 11) * 0x1.0p-53; }

// splitmix64 generator: the state is a counter, each draw mixes it.
class Rng {
 public:
  explicit constexpr Rng(std::uint64_t seed) noexcept : state_(seed) {}
  constexpr std::uint64_t next() noexcept {
    const std::uint64_t r = splitmix64(state_);
    state_ += kGolden;
    return r;
  }
  // [0, 1)
  constexpr double uniform() noexcept { return unit_double(next()); }
  // (0, 1): never 0, so log() is finite.
  constexpr double uniform_open() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller (cosine branch only; two draws each).
  double normal() noexcept {
    const double u1 = uniform_open();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

// A standard normal that is a pure function of a 64-bit key.
inline double keyed_normal(std::uint64_t key) noexcept {
  Rng r(splitmix64(key));
  return r.normal();
}

// Criteo categorical value -> local row of feature `feature`'s table.
// Scheme (stated in README.md): row 0 of every table is the dedicated
// "missing" row (empty field). A present 32-bit hash h maps to
//     1 + splitmix64((feature << 32) | h) % (rows - 1)
// so distinct features with the same hash land on unrelated rows. rows >= 2.
constexpr std::int64_t criteo_row(bool present, std::uint32_t h, int feature, std::int64_t rows) noexcept {
  if (!present) return 0;
  const std::uint64_t key = (static_cast<std::uint64_t>(feature) << 32) | h;
  return 1 + static_cast<std::int64_t>(splitmix64(key) % static_cast<std::uint64_t>(rows - 1));
}

}  // namespace dlrm
