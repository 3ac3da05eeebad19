// A small strict JSON parser (RFC 8259) for reading model config files; errors name the byte
// offset.
//
// Strict means: one value per document, no comments, no trailing commas, no NaN/Infinity, no
// leading zeros or '+' signs, no raw control characters or invalid UTF-8 inside strings, no lone
// surrogates in \u escapes, and no duplicate keys in an object (Python keeps the last one silently;
// a config with two different "rope_theta" entries is better refused than guessed at).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <vector>

#include "lazyattn/error.hpp"

namespace lazyattn::detail::json {

enum class Kind : std::uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };

constexpr std::string_view to_string(Kind k) {
  switch (k) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "a boolean";
    case Kind::kNumber: return "a number";
    case Kind::kString: return "a string";
    case Kind::kArray: return "an array";
    case Kind::kObject: return "an object";
  }
  return "unknown";
}

struct Member;

struct Value {
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  // Numbers written without a fraction or exponent that fit int64 are also kept exactly here;
  // 4096 and 4096.0 are the same double but only the first is an integer literal.
  bool is_integer = false;
  std::int64_t integer = 0;
  std::string string;  // decoded UTF-8
  std::vector<Value> array;
  std::vector<Member> object;  // in document order
  std::size_t begin = 0;       // byte offset of the value's first character
  std::size_t end = 0;         // one past its last character: text.substr(begin, end - begin)

  bool is_null() const { return kind == Kind::kNull; }
  // The member named `key`, or nullptr. Objects are small (config files), so a scan is enough.
  inline const Value* find(std::string_view key) const;
};

struct Member {
  std::string key;
  Value value;
};

inline const Value* Value::find(std::string_view key) const {
  for (const Member& m : object) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value parse_document() {
    skip_whitespace();
    Value v = parse_value(0);
    skip_whitespace();
    if (pos_ != text_.size()) fail("end of input after the top-level value");
    return v;
  }

 private:
  // Deep enough for any config file, shallow enough that recursion cannot exhaust the stack.
  static constexpr int kMaxDepth = 256;

  std::string_view text_;
  std::size_t pos_ = 0;

  // "json: byte 17 (line 2, column 5): expected ':' after an object key, got 'x'"
  [[noreturn]] void fail(std::string_view expected) const { fail_at(pos_, expected); }

  [[noreturn]] void fail_at(std::size_t at, std::string_view expected) const {
    std::size_t line = 1;
    std::size_t column = 1;
    for (std::size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string got;
    if (at >= text_.size()) {
      got = "end of input";
    } else {
      auto c = static_cast<unsigned char>(text_[at]);
      if (c >= 0x20 && c < 0x7f) {
        got = concat("'", static_cast<char>(c), "'");
      } else {
        constexpr std::string_view kHex = "0123456789abcdef";
        got = concat("byte 0x", kHex[c >> 4], kHex[c & 15]);
      }
    }
    throw_error("json: byte ", at, " (line ", line, ", column ", column, "): expected ", expected,
                ", got ", got);
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_whitespace() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  void expect_literal(std::string_view word) {
    for (char c : word) {
      if (peek() != c) fail(concat("the literal '", word, "'"));
      ++pos_;
    }
  }

  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail(concat("at most ", kMaxDepth, " levels of nesting"));
    Value v;
    v.begin = pos_;
    switch (peek()) {
      case '{': parse_object(v, depth); break;
      case '[': parse_array(v, depth); break;
      case '"':
        v.kind = Kind::kString;
        v.string = parse_string();
        break;
      case 't':
        expect_literal("true");
        v.kind = Kind::kBool;
        v.boolean = true;
        break;
      case 'f':
        expect_literal("false");
        v.kind = Kind::kBool;
        break;
      case 'n':
        expect_literal("null");
        v.kind = Kind::kNull;
        break;
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
          parse_number(v);
        } else {
          fail("a value (object, array, string, number, true, false or null)");
        }
    }
    v.end = pos_;
    return v;
  }

  void parse_object(Value& v, int depth) {
    v.kind = Kind::kObject;
    std::unordered_set<std::string> seen;  // the keys so far: one lookup each, not a scan
    ++pos_;  // '{'
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("a string key in an object");
      std::size_t key_at = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second)
        fail_at(key_at, concat("no duplicate key \"", ::lazyattn::detail::printable(key), "\""));
      skip_whitespace();
      if (peek() != ':') fail("':' after an object key");
      ++pos_;
      skip_whitespace();
      Value member = parse_value(depth + 1);
      v.object.push_back(Member{std::move(key), std::move(member)});
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return;
      }
      fail("',' or '}' after an object member");
    }
  }

  void parse_array(Value& v, int depth) {
    v.kind = Kind::kArray;
    ++pos_;  // '['
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_whitespace();
      v.array.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return;
      }
      fail("',' or ']' after an array element");
    }
  }

  void parse_number(Value& v) {
    std::size_t start = pos_;
    bool integral = true;
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (peek() >= '0' && peek() <= '9') fail("no leading zero in a number");
    } else if (peek() >= '1' && peek() <= '9') {
      while (peek() >= '0' && peek() <= '9') ++pos_;
    } else {
      fail("a digit in a number");
    }
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("a digit after the decimal point");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!(peek() >= '0' && peek() <= '9')) fail("a digit in the exponent");
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    v.kind = Kind::kNumber;
    // from_chars rounds correctly (round to nearest) and, unlike strtod, ignores the C locale.
    auto [ptr, ec] = std::from_chars(first, last, v.number);
    if (ec == std::errc::result_out_of_range && ptr == last) {
      // Too large fails; too small reads as zero, as Python's json does for 1e-400 (values in the
      // subnormal range, which from_chars may also report as out of range, become zero too).
      if (decimal_exponent(first, last) > 0) fail_at(start, "a number within the range of double");
      v.number = *first == '-' ? -0.0 : 0.0;
    } else if (ec != std::errc() || ptr != last) {
      fail_at(start, "a number");
    }
    if (integral) {
      auto [iptr, iec] = std::from_chars(first, last, v.integer);
      v.is_integer = iec == std::errc() && iptr == last;
    }
  }

  // Roughly log10 of a valid, non-zero number literal's magnitude; only its sign is used, to tell
  // overflow from underflow.
  static std::int64_t decimal_exponent(const char* first, const char* last) {
    const char* p = first;
    if (*p == '-') ++p;
    std::int64_t digits_before_point = 0;
    bool seen_nonzero = false;
    for (; p != last && *p >= '0' && *p <= '9'; ++p) {
      seen_nonzero = seen_nonzero || *p != '0';
      if (seen_nonzero) ++digits_before_point;
    }
    std::int64_t leading_fraction_zeros = 0;
    if (p != last && *p == '.') {
      for (++p; p != last && *p >= '0' && *p <= '9'; ++p) {
        if (!seen_nonzero && *p == '0') ++leading_fraction_zeros;
        seen_nonzero = seen_nonzero || *p != '0';
      }
    }
    std::int64_t exponent = 0;
    if (p != last && (*p == 'e' || *p == 'E')) {
      ++p;
      bool negative = *p == '-';
      if (*p == '-' || *p == '+') ++p;
      for (; p != last; ++p) exponent = std::min<std::int64_t>(exponent * 10 + (*p - '0'), 1 << 30);
      if (negative) exponent = -exponent;
    }
    return exponent + (digits_before_point > 0 ? digits_before_point : -leading_fraction_zeros);
  }

  unsigned parse_hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = peek();
      unsigned d = 0;
      if (c >= '0' && c <= '9') {
        d = static_cast<unsigned>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<unsigned>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<unsigned>(c - 'A' + 10);
      } else {
        fail("four hex digits after \\u");
      }
      code = code * 16 + d;
      ++pos_;
    }
    return code;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // Copies one raw UTF-8 sequence, refusing overlong forms, surrogates and values past U+10FFFF.
  void copy_utf8_sequence(std::string& out) {
    std::size_t start = pos_;
    auto lead = static_cast<unsigned char>(text_[pos_]);
    int extra = 0;
    std::uint32_t cp = 0;
    std::uint32_t min = 0;
    if (lead >= 0xc2 && lead <= 0xdf) {
      extra = 1;
      cp = lead & 0x1fu;
      min = 0x80;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      extra = 2;
      cp = lead & 0x0fu;
      min = 0x800;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      extra = 3;
      cp = lead & 0x07u;
      min = 0x10000;
    } else {
      fail("valid UTF-8 in a string");
    }
    ++pos_;
    for (int i = 0; i < extra; ++i) {
      if (at_end() || (static_cast<unsigned char>(text_[pos_]) & 0xc0u) != 0x80u) {
        fail("a UTF-8 continuation byte");
      }
      cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_]) & 0x3fu);
      ++pos_;
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      fail_at(start,
              "valid UTF-8 in a string (no overlong form, surrogate or code point > U+10FFFF)");
    }
    out.append(text_.substr(start, pos_ - start));
  }

  std::string parse_string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail("'\"' to close the string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("no raw control character in a string (escape it)");
      if (c >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;  // backslash
      char e = peek();
      std::size_t escape_at = pos_;
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = parse_hex4();
          if (cp >= 0xdc00 && cp <= 0xdfff) {
            fail_at(escape_at - 1, "a high surrogate before a low surrogate in \\u escapes");
          }
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (peek() != '\\') fail("a \\u low surrogate after a high surrogate");
            ++pos_;
            if (peek() != 'u') fail("a \\u low surrogate after a high surrogate");
            ++pos_;
            std::uint32_t low = parse_hex4();
            if (low < 0xdc00 || low > 0xdfff) {
              fail_at(pos_ - 6, "a low surrogate (\\udc00..\\udfff) after a high surrogate");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail_at(escape_at, "an escape character (one of \" \\ / b f n r t u)");
      }
    }
  }
};

// Parses one JSON document. Throws lazyattn::Error naming the byte offset and what was expected.
inline Value parse(std::string_view text) { return Parser(text).parse_document(); }

}  // namespace lazyattn::detail::json
