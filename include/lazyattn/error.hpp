// lazyattn::Error and the LAZYATTN_CHECK macro every public entry point validates its inputs with.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
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

// A user's text as it may appear in a message: control bytes (a NUL would end what() there) and
// backslashes escaped, as \xNN and \\.
inline std::string printable(std::string_view text) {
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace detail
}  // namespace lazyattn

// LAZYATTN_CHECK(cond, "where: ", "value ", v, ", expected ...") throws lazyattn::Error when the
// condition is false. The message parts are only evaluated on failure.
#define LAZYATTN_CHECK(cond, ...)                         \
  do {                                                    \
    if (!(cond)) ::lazyattn::detail::throw_error(__VA_ARGS__); \
  } while (0)
