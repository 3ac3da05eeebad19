// Tests for detail/json.hpp: what a strict parser accepts, how it decodes strings and numbers, and
// that every malformed input fails with the byte offset and what was expected.
#include "support/catch.hpp"
#include <cstdint>
#include <string>
#include <string_view>

#include "lazyattn/detail/json.hpp"
#include "lazyattn/error.hpp"

using namespace lazyattn;
namespace json = lazyattn::detail::json;

TEST_CASE("json: objects, arrays, literals and offsets", "[rope][json]") {
  std::string_view text = R"( {"a": [1, -2.5, true, false, null, {}, []], "b": {"c": "d"}} )";
  json::Value v = json::parse(text);
  REQUIRE(v.kind == json::Kind::kObject);
  CHECK(v.begin == 1);
  CHECK(v.end == text.size() - 1);
  REQUIRE(v.object.size() == 2);
  CHECK(v.object[0].key == "a");  // document order kept
  const json::Value* a = v.find("a");
  REQUIRE(a != nullptr);
  REQUIRE(a->kind == json::Kind::kArray);
  REQUIRE(a->array.size() == 7);
  CHECK(a->array[0].is_integer);
  CHECK(a->array[0].integer == 1);
  CHECK(a->array[1].number == -2.5);
  CHECK_FALSE(a->array[1].is_integer);
  CHECK(a->array[2].boolean);
  CHECK(a->array[3].kind == json::Kind::kBool);
  CHECK_FALSE(a->array[3].boolean);
  CHECK(a->array[4].is_null());
  CHECK(a->array[5].kind == json::Kind::kObject);
  CHECK(a->array[5].object.empty());
  CHECK(a->array[6].array.empty());
  const json::Value* c = v.find("b")->find("c");
  REQUIRE(c != nullptr);
  CHECK(c->string == "d");
  CHECK(text.substr(c->begin, c->end - c->begin) == "\"d\"");
  CHECK(v.find("missing") == nullptr);
  // Scalars are documents too.
  CHECK(json::parse("42").integer == 42);
  CHECK(json::parse(" \"x\"\n").string == "x");
  CHECK(json::parse("null").is_null());
}

TEST_CASE("json: numbers round correctly and integers stay exact", "[rope][json]") {
  CHECK(json::parse("0").number == 0.0);
  CHECK(json::parse("-0").number == 0.0);
  CHECK(json::parse("1e3").number == 1000.0);
  CHECK_FALSE(json::parse("1e3").is_integer);  // an exponent makes it a float literal
  CHECK(json::parse("1.5E-2").number == 0.015);
  CHECK(json::parse("500000.0").number == 500000.0);
  CHECK(json::parse("1.0299999713897705").number == 1.0299999713897705);
  CHECK(json::parse("0.1").number == 0.1);
  json::Value big = json::parse("9223372036854775807");
  CHECK(big.is_integer);
  CHECK(big.integer == INT64_MAX);
  json::Value bigger = json::parse("9223372036854775808");  // past int64: a double only
  CHECK_FALSE(bigger.is_integer);
  CHECK(bigger.number == 9223372036854775808.0);
  CHECK(json::parse("-9223372036854775808").integer == INT64_MIN);
  CHECK(json::parse("1e-400").number == 0.0);  // underflow reads as zero, as in Python
  CHECK(
      json::parse("-0.0000000000000000000000000000000000000000000000000000000000000000000000000000"
                  "000000000000000000000000000000000000000000000000000000000000000000000000000000"
                  "000000000000000000000000000000000000000000000000000000000000000000000000000000"
                  "000000000000000000000000000000000000000000000000000000000000000000000000000000"
                  "0000000000000000001")
          .number == 0.0);
  CHECK_THROWS_WITH(json::parse("-1.5e400"), Catch::Contains("within the range of double"));
  CHECK_THROWS_WITH(json::parse("1" + std::string(400, '0')),
                    Catch::Contains("within the range of double"));
}

TEST_CASE("json: string escapes and UTF-8", "[rope][json]") {
  CHECK(json::parse(R"("\"\\\/\b\f\n\r\t")").string == "\"\\/\b\f\n\r\t");
  CHECK(json::parse(R"("\u0041\u00e9\u20AC")").string == "A\xc3\xa9\xe2\x82\xac");
  CHECK(json::parse(R"("\ud83d\ude00")").string == "\xf0\x9f\x98\x80");  // surrogate pair
  CHECK(json::parse("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"").string == "caf\xc3\xa9 \xf0\x9f\x98\x80");
  CHECK(json::parse(R"("\u0000")").string == std::string(1, '\0'));
}

TEST_CASE("json: malformed input fails naming the byte and what was expected",
          "[rope][json][error]") {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"", "byte 0 (line 1, column 1): expected a value"},
      {"   ", "byte 3 (line 1, column 4): expected a value"},
      {"{", "byte 1 (line 1, column 2): expected a string key in an object, got end of input"},
      {R"({"a":1,})", "byte 7 (line 1, column 8): expected a string key in an object, got '}'"},
      {R"({"a" 1})", "byte 5 (line 1, column 6): expected ':' after an object key, got '1'"},
      {R"({"a":1 "b":2})", "byte 7 (line 1, column 8): expected ',' or '}' after an object member"},
      {R"({a:1})", "byte 1 (line 1, column 2): expected a string key in an object, got 'a'"},
      {"[1,]", "byte 3 (line 1, column 4): expected a value"},
      {"[1 2]", "byte 3 (line 1, column 4): expected ',' or ']' after an array element, got '2'"},
      {"[1",
       "byte 2 (line 1, column 3): expected ',' or ']' after an array element, got end of input"},
      {"01", "byte 1 (line 1, column 2): expected no leading zero in a number"},
      {"-", "byte 1 (line 1, column 2): expected a digit in a number"},
      {"+1", "byte 0 (line 1, column 1): expected a value"},
      {"1.", "byte 2 (line 1, column 3): expected a digit after the decimal point"},
      {".5", "byte 0 (line 1, column 1): expected a value"},
      {"1e", "byte 2 (line 1, column 3): expected a digit in the exponent"},
      {"1e999", "byte 0 (line 1, column 1): expected a number within the range of double"},
      {"NaN", "byte 0 (line 1, column 1): expected a value"},
      {"Infinity", "byte 0 (line 1, column 1): expected a value"},
      {"tru", "byte 3 (line 1, column 4): expected the literal 'true', got end of input"},
      {"nul1", "byte 3 (line 1, column 4): expected the literal 'null', got '1'"},
      {"true false", "byte 5 (line 1, column 6): expected end of input after the top-level value"},
      {"{} // comment",
       "byte 3 (line 1, column 4): expected end of input after the top-level value"},
      {"\"abc", "byte 4 (line 1, column 5): expected '\"' to close the string, got end of input"},
      {"\"a\nb\"", "byte 2 (line 1, column 3): expected no raw control character in a string"},
      {R"("\x")", "byte 2 (line 1, column 3): expected an escape character"},
      {R"("\u12G4")", "byte 5 (line 1, column 6): expected four hex digits after \\u, got 'G'"},
      {R"("\udc00")",
       "byte 1 (line 1, column 2): expected a high surrogate before a low surrogate"},
      {R"("\ud800")", "byte 7 (line 1, column 8): expected a \\u low surrogate after a high"},
      {R"("\ud800\u0041")",
       "byte 7 (line 1, column 8): expected a low surrogate (\\udc00..\\udfff)"},
      {"\"\xff\"", "byte 1 (line 1, column 2): expected valid UTF-8 in a string, got byte 0xff"},
      {"\"\xc0\xaf\"",
       "byte 1 (line 1, column 2): expected valid UTF-8 in a string, got byte 0xc0"},
      {"\"\xe2\x82\"", "byte 3 (line 1, column 4): expected a UTF-8 continuation byte, got '\"'"},
      {"\"\xed\xa0\x80\"",
       "byte 1 (line 1, column 2): expected valid UTF-8 in a string (no "
       "overlong form, surrogate"},
      {"\xef\xbb\xbf{}",
       "byte 0 (line 1, column 1): expected a value (object, array, string, number, "
       "true, false or null), got byte 0xef"},
      {R"({"a":1,"a":2})", "byte 7 (line 1, column 8): expected no duplicate key \"a\""},
      // A key holding a NUL is shown escaped, so the message goes on past it.
      {R"({"a\u0000b":1,"a\u0000b":2})",
       "byte 14 (line 1, column 15): expected no duplicate key \"a\\x00b\""},
      {"{\n  \"rope_theta\": 1e4,\n  \"x\" 1\n}", "byte 29 (line 3, column 7): expected ':'"},
      {std::string(300, '['),
       "byte 257 (line 1, column 258): expected at most 256 levels of nesting"},
  };
  for (const Case& c : cases) {
    INFO("input: " << c.text);
    CHECK_THROWS_AS(json::parse(c.text), Error);
    CHECK_THROWS_WITH(json::parse(c.text), Catch::Contains("json: " + c.message));
  }
  // Nesting up to the limit is fine.
  CHECK_NOTHROW(json::parse(std::string(200, '[') + std::string(200, ']')));
}
