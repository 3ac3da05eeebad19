// cuda::detail::Packer (host-only): arrays of mixed element types land at 16-byte boundaries, back
// to back, with their bytes intact; empty arrays take no room.
#include "support/catch.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lazyattn/cuda/packer.hpp"

TEST_CASE("packer: 16-byte aligned offsets, bytes copied in place", "[packer]") {
  const std::vector<std::int32_t> a{1, 2, 3};                   // 12 bytes
  const std::vector<std::int64_t> b{-5, 1ll << 40};             // 16 bytes
  const std::vector<std::uint8_t> empty;
  const std::vector<std::uint8_t> c{7, 8, 9, 10, 11};           // 5 bytes
  lazyattn::cuda::detail::Packer pk;
  const std::size_t oa = pk.add(a), ob = pk.add(b), oe = pk.add(empty), oc = pk.add(c);
  CHECK(oa == 0);
  CHECK(ob == 16);
  CHECK(oe == 32);
  CHECK(oc == 32);  // an empty array takes no room
  CHECK(pk.size() == 37);

  std::vector<std::byte> buf(pk.size(), std::byte{0xee});
  pk.write(buf.data());
  std::vector<std::int32_t> ga(3);
  std::vector<std::int64_t> gb(2);
  std::vector<std::uint8_t> gc(5);
  std::memcpy(ga.data(), buf.data() + oa, 12);
  std::memcpy(gb.data(), buf.data() + ob, 16);
  std::memcpy(gc.data(), buf.data() + oc, 5);
  CHECK(ga == a);
  CHECK(gb == b);
  CHECK(gc == c);
  CHECK(buf[12] == std::byte{0xee});  // padding is not written
}
