// Catch2, v2 or v3, behind one include: Debian 12 ships 2.13 (<catch2/catch.hpp>), Debian 13 and
// Ubuntu 24.04 ship 3.x (<catch2/catch_all.hpp>). The tests use v2 spellings; v3 gets aliases.
#pragma once

// CMake defines LAZYATTN_CATCH_V3 from the version find_package found (a machine can have v3
// headers on its default include path while the package found is v2); __has_include is the
// fallback for other builds.
#ifndef LAZYATTN_CATCH_V3
#if __has_include(<catch2/catch_all.hpp>)
#define LAZYATTN_CATCH_V3 1
#else
#define LAZYATTN_CATCH_V3 0
#endif
#endif

#if LAZYATTN_CATCH_V3
#include <catch2/catch_all.hpp>

#include <string>
namespace Catch {
// v2's Catch::Contains(string) matcher.
inline Matchers::StringContainsMatcher Contains(const std::string& s) {
  return Matchers::ContainsSubstring(s);
}
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
