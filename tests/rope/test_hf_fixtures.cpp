// Checks lazyattn's schedules against what transformers itself computes: tests/data/
// hf_rope_fixtures.json, written by scripts/hf_rope_fixtures.py on a machine with transformers.
//
// Each case holds a config (as config.json fields, and as transformers saved it: `config_saved`),
// the seq_len the module was driven to (or null), and what the rotary module returned after a
// forward over `positions` (+ seq_len - 1): inv_freq, attention_factor, and cos/sin per position
// over the rotary dims, already multiplied by attention_factor. The module's frequencies are those
// of the longest request it saw, so they are compared with compute_rope_frequencies(config, L),
// L = max(seq_len, max(positions) + 1). transformers works in float32: inv_freq is compared with
// rtol 1e-5, attention_factor with rtol 1e-6, cos/sin with atol 2e-4 plus float32's share of the
// angle's rounding (see below).
#include <fmt/format.h>

#include <algorithm>
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "lazyattn/detail/json.hpp"
#include "lazyattn/rope.hpp"
#include "support/compare.hpp"

using namespace lazyattn;
namespace json = lazyattn::detail::json;
using lazyattn::test::Tolerance;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const json::Value& member(const json::Value& obj, const char* key) {
  const json::Value* v = obj.find(key);
  INFO("fixture member \"" << key << "\"");
  REQUIRE(v != nullptr);
  return *v;
}

std::vector<double> numbers(const json::Value& array) {
  REQUIRE(array.kind == json::Kind::kArray);
  std::vector<double> out;
  for (const json::Value& v : array.array) {
    REQUIRE(v.kind == json::Kind::kNumber);
    out.push_back(v.number);
  }
  return out;
}

}  // namespace

TEST_CASE("schedules match transformers' rotary embedding (tests/data/hf_rope_fixtures.json)",
          "[rope][hf]") {
  const std::string path = std::string(LAZYATTN_TEST_DATA_DIR) + "/hf_rope_fixtures.json";
  INFO("fixture file " << path);
  REQUIRE(std::filesystem::exists(path));
  const std::string text = read_file(path);
  json::Value root = json::parse(text);
  INFO("transformers " << member(root, "transformers_version").string);
  if (const json::Value* failed = root.find("failed")) {
    for (const json::Value& f : failed->array) {
      INFO("case that transformers could not build: " << f.find("name")->string << ": "
                                                      << f.find("error")->string);
      CHECK(false);
    }
  }
  const json::Value& cases = member(root, "cases");
  REQUIRE(cases.kind == json::Kind::kArray);
  REQUIRE_FALSE(cases.array.empty());

  for (const json::Value& cs : cases.array) {
    const std::string name = member(cs, "name").string;
    INFO("case " << name);
    const json::Value& config_json = member(cs, "config");
    RopeConfig config = rope_config_from_json(
        std::string_view(text).substr(config_json.begin, config_json.end - config_json.begin));
    std::vector<std::int64_t> positions;
    for (const json::Value& p : member(cs, "positions").array) positions.push_back(p.integer);
    REQUIRE_FALSE(positions.empty());
    std::int64_t length = *std::max_element(positions.begin(), positions.end()) + 1;
    const json::Value& seq_len = member(cs, "seq_len");
    if (!seq_len.is_null()) length = std::max(length, seq_len.integer);
    RopeFrequencies f = compute_rope_frequencies(config, length);

    // The same model as transformers 5 writes it back (rope_parameters) reads to the same thing.
    if (const json::Value* saved = cs.find("config_saved")) {
      RopeConfig again = rope_config_from_json(
          std::string_view(text).substr(saved->begin, saved->end - saved->begin));
      RopeFrequencies g = compute_rope_frequencies(again, length);
      CHECK(g.inv_freq == f.inv_freq);
      CHECK(g.attention_factor == f.attention_factor);
      CHECK(g.pair_layout == f.pair_layout);
    }

    std::vector<double> hf_inv_freq = numbers(member(cs, "inv_freq"));
    LAZYATTN_CHECK_CLOSE(f.inv_freq, hf_inv_freq, (Tolerance{0.0, 1e-5}));
    double hf_attention = member(cs, "attention_factor").number;
    CHECK(f.attention_factor == Approx(hf_attention).epsilon(1e-6));

    // Expected cos/sin rows through lazyattn's own angle path: pair i sits at pair_dims(i).
    // Tolerance per element: atol 2e-4, plus what float32 does to the angle p * w in transformers:
    // w rounded to float32 and the product rounded again, each up to 2^-24 |p w| (at p = 4095 that
    // is ~3e-4 rad for the fastest pairs, more than the atol alone allows).
    const json::Value& cos_rows = member(cs, "cos");
    const json::Value& sin_rows = member(cs, "sin");
    REQUIRE(cos_rows.array.size() == positions.size());
    REQUIRE(sin_rows.array.size() == positions.size());
    std::size_t mismatches = 0;
    std::string report;
    double worst = 0;  // largest |error| / tolerance
    for (std::size_t r = 0; r < positions.size(); ++r) {
      std::vector<double> got_cos = numbers(cos_rows.array[r]);
      std::vector<double> got_sin = numbers(sin_rows.array[r]);
      REQUIRE(got_cos.size() == static_cast<std::size_t>(f.rotary_dim));
      REQUIRE(got_sin.size() == static_cast<std::size_t>(f.rotary_dim));
      for (int i = 0; i < f.num_pairs(); ++i) {
        rope::CosSin want = rope::cos_sin(positions[r], f.turns[i]);
        double angle = std::fabs(static_cast<double>(positions[r]) * f.inv_freq[i]);
        double tol = 2e-4 + f.attention_factor * angle * 0x1p-23;
        rope::PairDims d = rope::pair_dims(f.pair_layout, f.rotary_dim, i);
        for (int dim : {d.first, d.second}) {
          for (auto [what, got, ref] :
               {std::tuple{"cos", got_cos[dim], f.attention_factor * want.cos},
                std::tuple{"sin", got_sin[dim], f.attention_factor * want.sin}}) {
            double err = std::fabs(got - ref);
            worst = std::max(worst, err / tol);
            if (!(err <= tol)) {  // NaN fails
              if (++mismatches <= 8) {
                report += fmt::format(
                    "  position {} dim {} {}: transformers {:.9g}, lazyattn {:.9g}"
                    " (|diff| {:.3g}, tolerance {:.3g})\n",
                    positions[r], dim, what, got, ref, err, tol);
              }
            }
          }
        }
      }
    }
    INFO(mismatches << " cos/sin values out of tolerance, first:\n" << report);
    CHECK(mismatches == 0);
    // The largest error stays well inside the tolerance when the schedule is right.
    INFO("largest error / tolerance " << worst);
    CHECK(worst < 1.0);
  }
}
