// Deterministic random numbers for the RAG benchmark: SplitMix64 and the draws built on it, the
// same on every platform (std:: distributions are not specified bit for bit across libraries).
#pragma once

#include <cmath>
#include <cstdint>

#include "lazyattn/detail/splitmix.hpp"

namespace lazyattn::rag {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    return lazyattn::detail::splitmix64_mix(state_ += lazyattn::detail::kGoldenGamma);
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [-a, a).
  float symmetric(float a) { return static_cast<float>((2.0 * uniform() - 1.0) * a); }
  // Uniform in [0, n); n > 0. The modulo bias is below 2^-40 for the n used here.
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  // Exponential with the given rate (mean 1 / rate): Poisson inter-arrival times.
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }

 private:
  std::uint64_t state_;
};

// One seed per (seed, stream, index): independent streams without sharing a generator's state.
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index = 0) {
  SplitMix64 g(seed ^ (stream * 0xd1342543de82ef95ull) ^ (index * 0x2545f4914f6cdd1dull));
  g.next();
  return g.next();
}

}  // namespace lazyattn::rag
