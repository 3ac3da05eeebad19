// Options the test runner (tests/main.cpp) parses beyond Catch2's own.
#pragma once

#include <cstdint>

namespace lazyattn::test {

struct Options {
  std::int64_t store_ops = 100000;
};

inline Options& options() {
  static Options o;
  return o;
}

}  // namespace lazyattn::test
