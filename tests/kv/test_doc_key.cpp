// DocKey::from_tokens against a second, independent FNV-1a-128 (two 64-bit halves, no __int128),
// published FNV vectors and pinned values, so the content hash cannot change silently.
#include "support/catch.hpp"
#include <cstdint>
#include <random>
#include <set>
#include <sstream>
#include <vector>

#include "lazyattn/kv/doc_key.hpp"

using lazyattn::DocKey;

namespace {

struct U128 {
  std::uint64_t hi, lo;
};

// h * (2^88 + 0x13b) mod 2^128, with 32-bit partial products only.
U128 times_fnv_prime(U128 h) {
  const std::uint64_t c = 0x13b;
  const std::uint64_t mask = 0xffffffffull;
  std::uint64_t lo_lo = (h.lo & mask) * c;  // < 2^41
  std::uint64_t lo_hi = (h.lo >> 32) * c;   // < 2^41
  std::uint64_t mid = (lo_lo >> 32) + (lo_hi & mask);
  std::uint64_t low = (lo_lo & mask) | (mid << 32);
  std::uint64_t carry = (lo_hi >> 32) + (mid >> 32);
  // The 2^88 term moves lo's bits 0..39 to bits 88..127, i.e. hi << 24; hi's bits fall off.
  std::uint64_t high = h.hi * c + carry + (h.lo << 24);
  return {high, low};
}

U128 fnv1a_128(const std::vector<std::uint8_t>& bytes) {
  U128 h{0x6c62272e07bb0142ull, 0x62b821756295c58dull};
  for (std::uint8_t b : bytes) {
    h.lo ^= b;
    h = times_fnv_prime(h);
  }
  return h;
}

std::vector<std::uint8_t> bytes_of(const char* s) {
  std::vector<std::uint8_t> out;
  for (; *s; ++s) out.push_back(static_cast<std::uint8_t>(*s));
  return out;
}

// The byte stream from_tokens documents: each id as 4 little-endian bytes, then the count as 8.
std::vector<std::uint8_t> token_bytes(const std::vector<std::int32_t>& tokens) {
  std::vector<std::uint8_t> out;
  for (std::int32_t t : tokens) {
    auto u = static_cast<std::uint32_t>(t);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
  }
  auto n = static_cast<std::uint64_t>(tokens.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(n >> (8 * i)));
  return out;
}

DocKey independent(const std::vector<std::int32_t>& tokens) {
  U128 h = fnv1a_128(token_bytes(tokens));
  return DocKey{h.hi, h.lo};
}

}  // namespace

TEST_CASE("the test's own FNV-1a-128 reproduces published vectors", "[kv][doc_key]") {
  U128 empty = fnv1a_128({});
  CHECK(empty.hi == 0x6c62272e07bb0142ull);
  CHECK(empty.lo == 0x62b821756295c58dull);
  U128 a = fnv1a_128(bytes_of("a"));
  CHECK(a.hi == 0xd228cb696f1a8cafull);
  CHECK(a.lo == 0x78912b704e4a8964ull);
  U128 foobar = fnv1a_128(bytes_of("foobar"));
  CHECK(foobar.hi == 0x343e1662793c64bfull);
  CHECK(foobar.lo == 0x6f0d3597ba446f18ull);
}

TEST_CASE("DocKey::from_tokens is FNV-1a-128 over ids and count, and stays so", "[kv][doc_key]") {
  // Pinned values (computed with Python's big integers) and the independent implementation.
  std::vector<std::int32_t> empty, one_two_three{1, 2, 3}, llama{128000, 791, 6864, -1};
  CHECK(DocKey::from_tokens(empty) == DocKey{0x9d30c1f78465995bull, 0xe47dda5e4e4e77edull});
  CHECK(DocKey::from_tokens(one_two_three) == DocKey{0xcfec7dc8d82c8698ull, 0x9c07ed47c1f2afdeull});
  CHECK(DocKey::from_tokens(llama) == DocKey{0x9d168f29c1a238e7ull, 0x88e34953a5db6974ull});
  std::ostringstream os;
  os << DocKey::from_tokens(one_two_three);
  CHECK(os.str() == "cfec7dc8d82c86989c07ed47c1f2afde");

  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int32_t> tokens(rng() % 40);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng());
    INFO("trial " << trial << ", " << tokens.size() << " tokens");
    CHECK(DocKey::from_tokens(tokens) == independent(tokens));
    CHECK(DocKey::from_tokens(tokens) == DocKey::from_tokens(tokens));  // deterministic
  }
}

TEST_CASE("DocKey::from_tokens tells permutations and extensions apart", "[kv][doc_key]") {
  std::set<DocKey> seen;
  std::vector<std::vector<std::int32_t>> inputs = {
      {},           {0},          {0, 0}, {0, 0, 0}, {1, 2, 3}, {3, 2, 1}, {2, 1, 3}, {1, 2},
      {1, 2, 3, 0}, {1, 2, 3, 3}, {-1},   {-1, -1},  {65536},   {256},     {1},
  };
  for (const auto& t : inputs) {
    INFO("input of " << t.size() << " tokens");
    CHECK(seen.insert(DocKey::from_tokens(t)).second);
  }
  CHECK(seen.size() == inputs.size());
  // The key compares and hashes like a value.
  DocKey a = DocKey::from_tokens(inputs[4]), b = DocKey::from_tokens(inputs[5]);
  CHECK(a != b);
  CHECK((a < b) != (b < a));
  CHECK(lazyattn::DocKeyHash{}(a) == lazyattn::DocKeyHash{}(DocKey::from_tokens(inputs[4])));
}
