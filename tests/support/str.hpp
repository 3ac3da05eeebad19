// A value as operator<< prints it, for comparing messages and printed handles in tests.
#pragma once

#include <sstream>
#include <string>

namespace lazyattn::test {

template <class T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace lazyattn::test
