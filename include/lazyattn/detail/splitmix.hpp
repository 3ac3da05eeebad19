// splitmix64's output function (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014): a bijective 64-bit mix, host and device. The store's fingerprint, the C
// ABI's handle salts and the RAG benchmark's generators mix with it.
#pragma once

#include <cstdint>

#include "lazyattn/config.hpp"

namespace lazyattn::detail {

inline constexpr std::uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;  // splitmix64's increment

LAZYATTN_HOST_DEVICE constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace lazyattn::detail
