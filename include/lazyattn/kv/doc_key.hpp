// DocKey: the 128-bit content key a document is stored under (a hash of its token ids, or the
// caller's own key).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <span>
#include <string_view>

namespace lazyattn {

struct DocKey {
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;

  friend bool operator==(const DocKey&, const DocKey&) = default;
  friend auto operator<=>(const DocKey&, const DocKey&) = default;

  // FNV-1a, 128-bit variant, over the little-endian bytes of each token id, then the count, so
  // that a sequence and its zero-padded extension differ. Stable across runs and machines.
  static DocKey from_tokens(std::span<const std::int32_t> tokens) {
    // __extension__ keeps -Wpedantic quiet about the (GCC and Clang) 128-bit integer.
    __extension__ typedef unsigned __int128 u128;
    u128 h = (static_cast<u128>(0x6c62272e07bb0142ull) << 64) |
             0x62b821756295c58dull;  // FNV-128 offset basis
    const u128 prime = (static_cast<u128>(0x0000000001000000ull) << 64) |
                       0x000000000000013bull;  // FNV-128 prime, 2^88 + 0x13b
    auto mix = [&](std::uint64_t word, int bytes) {
      for (int i = 0; i < bytes; ++i) {
        h ^= static_cast<unsigned char>(word >> (8 * i));
        h *= prime;
      }
    };
    for (std::int32_t t : tokens) mix(static_cast<std::uint32_t>(t), 4);
    mix(static_cast<std::uint64_t>(tokens.size()), 8);
    return {static_cast<std::uint64_t>(h >> 64), static_cast<std::uint64_t>(h)};
  }
};

inline std::ostream& operator<<(std::ostream& os, const DocKey& k) {
  const char* digits = "0123456789abcdef";
  char buf[33];
  for (int i = 0; i < 16; ++i) buf[i] = digits[(k.hi >> (60 - 4 * i)) & 0xf];
  for (int i = 0; i < 16; ++i) buf[16 + i] = digits[(k.lo >> (60 - 4 * i)) & 0xf];
  buf[32] = 0;
  return os << buf;
}

struct DocKeyHash {
  std::size_t operator()(const DocKey& k) const noexcept {
    return static_cast<std::size_t>(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ull));
  }
};

}  // namespace lazyattn
