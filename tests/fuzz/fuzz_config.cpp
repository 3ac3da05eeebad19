// libFuzzer target: the config.json reader and every schedule's frequencies on arbitrary bytes.
// Any input either gives a RopeConfig whose frequencies and rotations compute, or throws
// lazyattn::Error; nothing else may escape, crash, hang or trip a sanitizer. scripts/test builds
// it with clang (-fsanitize=fuzzer,address,undefined) and runs it for a bounded time over the
// corpus in tests/fuzz/corpus/.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "lazyattn/rope.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const lazyattn::RopeConfig c = lazyattn::rope_config_from_json(text);
    lazyattn::RopePolicy policy(c);
    // The request lengths that switch dynamic and longrope, and a far one.
    for (std::int64_t len : {std::int64_t{0}, std::int64_t{4097}, std::int64_t{1} << 40}) {
      const lazyattn::RopeFrequencies f = policy.frequencies(len);
      std::vector<float> v(static_cast<std::size_t>(f.head_dim), 0.5f);
      lazyattn::rope::rotate(f, len - 1, std::span<float>(v));
    }
  } catch (const lazyattn::Error&) {
  }
  return 0;
}
