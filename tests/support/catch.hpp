// Catch2, v2 or v3, behind one include: Debian 12 ships 2.13 (<catch2/catch.hpp>), Debian 13 and
// Ubuntu 24.04 ship 3.x (<catch2/catch_all.hpp>). The tests use v2 spellings; v3 gets aliases.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>
#define LAZYATTN_CATCH_V3 1
namespace Catch {
// v2's Catch::Contains(string) matcher.
inline Matchers::StringContainsMatcher Contains(const std::string& s) {
  return Matchers::ContainsSubstring(s);
}
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#define LAZYATTN_CATCH_V3 0
#endif
