// Seeded random inputs for tests: normal vectors and token ids. Never zeros: they hide unwritten outputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace lazyattn::test {

using Rng = std::mt19937_64;

inline std::vector<float> random_normal(std::size_t n, Rng& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, Rng& rng, std::int32_t vocab = 128256) {
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace lazyattn::test
