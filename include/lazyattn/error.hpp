// lazyattn::Error and the LAZYATTN_CHECK macro every public entry point validates its inputs with.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lazyattn {

// The one exception type the library throws. Its message names the function, the bad value and
// what was expected, e.g. "KvStore::insert: length 0, expected >= 1".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <class... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw Error(concat(std::forward<Args>(args)...));
}

}  // namespace detail
}  // namespace lazyattn

// LAZYATTN_CHECK(cond, "where: ", "value ", v, ", expected ...") throws lazyattn::Error when the
// condition is false. The message parts are only evaluated on failure.
#define LAZYATTN_CHECK(cond, ...)                         \
  do {                                                    \
    if (!(cond)) ::lazyattn::detail::throw_error(__VA_ARGS__); \
  } while (0)
