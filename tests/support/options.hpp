// Options the test runner (tests/main.cpp) parses beyond Catch2's own.
#pragma once

#include <cstdint>

namespace lazyattn::test {

struct Options {
  std::int64_t store_ops = 100000;
  int cuda_cases = 48;  // scenarios in the CUDA sweeps (small under compute-sanitizer)
};

inline Options& options() {
  static Options o;
  return o;
}

}  // namespace lazyattn::test
