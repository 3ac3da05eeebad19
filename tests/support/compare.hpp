// Per-element comparison for tests: |got - ref| <= atol + rtol * |ref| for every
// element, NaN fails, and a failure reports the first mismatches as (index, reference, got).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include <cstdio>

namespace lazyattn::test {

// printf-style formatting into a std::string. Not fmt: this header is also compiled by nvcc,
// whose front end cannot run fmt's compile-time format checks.
template <class... Args>
std::string format(const char* spec, Args... args) {
  int n = std::snprintf(nullptr, 0, spec, args...);
  std::string out(static_cast<std::size_t>(n > 0 ? n : 0), '\0');
  if (n > 0) std::snprintf(out.data(), out.size() + 1, spec, args...);
  return out;
}

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

struct Comparison {
  bool ok = true;
  std::size_t checked = 0;
  std::size_t mismatches = 0;
  double max_abs_error = 0;
  std::string report;  // empty when ok
};

template <class Got, class Ref>
Comparison compare(std::span<const Got> got, std::span<const Ref> ref, Tolerance tol,
                   std::size_t max_listed = 8) {
  Comparison c;
  if (got.size() != ref.size()) {
    c.ok = false;
    c.report = format("size mismatch: got %zu elements, reference %zu", got.size(), ref.size());
    return c;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    double g = static_cast<double>(got[i]);
    double r = static_cast<double>(ref[i]);
    double err = std::fabs(g - r);
    bool good = std::isfinite(g) && std::isfinite(r) && err <= tol.atol + tol.rtol * std::fabs(r);
    ++c.checked;
    if (std::isfinite(err) && err > c.max_abs_error) c.max_abs_error = err;
    if (!good) {
      if (c.mismatches < max_listed) {
        c.report += format("  [%zu] ref %.9g got %.9g (|diff| %.3g)\n", i, r, g, err);
      }
      ++c.mismatches;
    }
  }
  c.ok = c.mismatches == 0;
  if (!c.ok) {
    c.report = format("%zu of %zu elements out of tolerance (atol %g, rtol %g), first:\n",
                      c.mismatches, c.checked, tol.atol, tol.rtol) +
               c.report;
  }
  return c;
}

template <class Got, class Ref>
Comparison compare(const Got& got, const Ref& ref, Tolerance tol) {
  using G = typename Got::value_type;
  using R = typename Ref::value_type;
  return compare(std::span<const G>(got.data(), got.size()), std::span<const R>(ref.data(), ref.size()),
                 tol);
}

}  // namespace lazyattn::test

// CHECK_CLOSE(got, ref, tol): a Catch2 CHECK over every element, reporting the first mismatches.
#define LAZYATTN_CHECK_CLOSE(got, ref, tol)                             \
  do {                                                                  \
    auto lazyattn_cmp_ = ::lazyattn::test::compare((got), (ref), (tol)); \
    INFO(lazyattn_cmp_.report);                                         \
    CHECK(lazyattn_cmp_.ok);                                            \
  } while (0)
