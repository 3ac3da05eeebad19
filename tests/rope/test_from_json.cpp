// Tests for rope/from_json.hpp: real model config.json files, both transformers spellings, the
// model-specific field names, and errors that name the field or value at fault.
#include "support/catch.hpp"
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "lazyattn/rope.hpp"
#include "rope/model_configs.hpp"

using namespace lazyattn;
namespace cfg = lazyattn::test::rope;

namespace {

bool same_config(const RopeConfig& a, const RopeConfig& b) {
  const RopeScaling& x = a.rope_scaling;
  const RopeScaling& y = b.rope_scaling;
  return a.head_dim == b.head_dim && a.rope_theta == b.rope_theta &&
         a.partial_rotary_factor == b.partial_rotary_factor &&
         a.max_position_embeddings == b.max_position_embeddings &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.pair_layout == b.pair_layout && x.rope_type == y.rope_type && x.factor == y.factor &&
         x.low_freq_factor == y.low_freq_factor && x.high_freq_factor == y.high_freq_factor &&
         x.original_max_position_embeddings == y.original_max_position_embeddings &&
         x.beta_fast == y.beta_fast && x.beta_slow == y.beta_slow && x.mscale == y.mscale &&
         x.mscale_all_dim == y.mscale_all_dim && x.truncate == y.truncate &&
         x.attention_factor == y.attention_factor && x.short_factor == y.short_factor &&
         x.long_factor == y.long_factor;
}

// A config.json with only the fields the reader needs, plus `extra` members.
std::string minimal(const std::string& extra) {
  return R"({"hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 8192)" +
         std::string(extra.empty() ? "" : ", ") + extra + "}";
}

}  // namespace

TEST_CASE("Llama-3.1-8B: llama3 schedule, both spellings", "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kLlama31_8B);
  CHECK(c.head_dim == 128);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.partial_rotary_factor == 1.0);
  CHECK(c.max_position_embeddings == 131072);
  CHECK_FALSE(c.original_max_position_embeddings);
  CHECK(c.pair_layout == PairLayout::kHalf);
  CHECK(c.rope_scaling.rope_type == RopeType::kLlama3);
  CHECK(c.rope_scaling.factor == 8.0);
  CHECK(c.rope_scaling.low_freq_factor == 1.0);
  CHECK(c.rope_scaling.high_freq_factor == 4.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  // transformers 5's saved form reads to the same config.
  CHECK(same_config(c, rope_config_from_json(cfg::kLlama31_8B_v5)));
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.inv_freq.size() == 64);
  CHECK(f.inv_freq[0] == 1.0);
  // The slowest pair (wavelength 2 pi 500000^(126/128), far past 8192) is divided by 8.
  CHECK(f.inv_freq[63] == Approx(std::pow(500000.0, -126.0 / 128) / 8).epsilon(1e-14));
  CHECK(f.attention_factor == 1.0);
}

TEST_CASE("Llama-3.2-1B: explicit head_dim, factor 32", "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kLlama32_1B);
  CHECK(c.head_dim == 64);
  CHECK(c.rope_scaling.rope_type == RopeType::kLlama3);
  CHECK(c.rope_scaling.factor == 32.0);
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.inv_freq.size() == 32);
  CHECK(f.inv_freq[31] == Approx(std::pow(500000.0, -62.0 / 64) / 32).epsilon(1e-14));
}

TEST_CASE("Qwen2.5-7B with YaRN: legacy type key, factor 4, attention factor 0.1 ln 4 + 1",
          "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kQwen25_7B_Yarn);
  CHECK(c.head_dim == 3584 / 28);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.rope_scaling.rope_type == RopeType::kYarn);
  CHECK(c.rope_scaling.factor == 4.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 32768);
  CHECK_FALSE(c.rope_scaling.beta_fast);
  CHECK_FALSE(c.rope_scaling.truncate);
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.attention_factor == Approx(1.0 + 0.1 * std::log(4.0)).epsilon(1e-15));
  CHECK(f.inv_freq[0] == 1.0);                                                      // extrapolated
  CHECK(f.inv_freq[63] == Approx(std::pow(1e6, -126.0 / 128) / 4).epsilon(1e-14));  // interpolated
  CHECK_FALSE(rope_policy_from_json(cfg::kQwen25_7B_Yarn).depends_on_length());
}

TEST_CASE("Mistral-7B: no rope_scaling at all is the default schedule", "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kMistral7B);
  CHECK(c.head_dim == 128);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.max_position_embeddings == 32768);
  CHECK(c.rope_scaling.rope_type == RopeType::kDefault);
  CHECK_FALSE(c.rope_scaling.factor);
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.inv_freq[1] == Approx(std::pow(10000.0, -2.0 / 128)).epsilon(1e-15));
}

TEST_CASE("GPT-J-6B: n_embd / n_head, rotary_dim 64 of 256, interleaved", "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kGptJ6B);
  CHECK(c.head_dim == 256);
  CHECK(c.max_position_embeddings == 2048);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.pair_layout == PairLayout::kInterleaved);
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.rotary_dim == 64);
  CHECK(f.inv_freq.size() == 32);
  CHECK(f.inv_freq[1] == Approx(std::pow(10000.0, -2.0 / 64)).epsilon(1e-15));
  // rotary_dim values that are not a clean fraction of the head still come back exactly.
  for (int rotary : {2, 6, 22, 38, 50, 62, 98, 254, 256}) {
    std::string text = R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": )" +
                       std::to_string(rotary) + "}";
    INFO(text);
    CHECK(compute_rope_frequencies(rope_config_from_json(text)).rotary_dim == rotary);
  }
  // GPT-J with rotary_dim null rotates the whole head.
  CHECK(rope_config_from_json(
            R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": null})")
            .partial_rotary_factor == 1.0);
}

TEST_CASE("Phi-3 128k: longrope ('su'), top-level original length, factor from the ratio",
          "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kPhi3_128k);
  CHECK(c.head_dim == 96);
  CHECK(c.max_position_embeddings == 131072);
  CHECK(c.original_max_position_embeddings == 4096);
  CHECK(c.rope_scaling.rope_type == RopeType::kLongrope);
  CHECK_FALSE(c.rope_scaling.factor);
  REQUIRE(c.rope_scaling.short_factor.size() == 48);
  REQUIRE(c.rope_scaling.long_factor.size() == 48);
  CHECK(c.rope_scaling.long_factor[0] == 1.0299999713897705);
  CHECK(c.rope_scaling.short_factor[47] == 3.049999999999997);
  RopePolicy policy = rope_policy_from_json(cfg::kPhi3_128k);
  CHECK(policy.depends_on_length());
  CHECK_THROWS_WITH(policy.check_form(StorageForm::kLocal, "test"),
                    Catch::Contains("rope_type longrope"));
  // factor 131072 / 4096 = 32: sqrt(1 + ln 32 / ln 4096) = sqrt(17 / 12).
  RopeFrequencies short_f = policy.frequencies(4096);
  RopeFrequencies long_f = policy.frequencies(4097);
  CHECK(short_f.attention_factor == Approx(std::sqrt(17.0 / 12.0)).epsilon(1e-15));
  CHECK(long_f.attention_factor == short_f.attention_factor);
  CHECK(short_f.inv_freq[47] ==
        Approx(std::pow(10000.0, -94.0 / 96) / 3.049999999999997).epsilon(1e-14));
  CHECK(long_f.inv_freq[47] ==
        Approx(std::pow(10000.0, -94.0 / 96) / 64.81001281738281).epsilon(1e-14));
}

TEST_CASE("DeepSeek-V3: qk_rope_head_dim, interleaved, integer factor and theta",
          "[rope][json][models]") {
  RopeConfig c = rope_config_from_json(cfg::kDeepSeekV3);
  CHECK(c.head_dim == 64);  // not 7168 / 128 = 56
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.pair_layout == PairLayout::kInterleaved);
  CHECK(c.max_position_embeddings == 163840);
  CHECK(c.rope_scaling.rope_type == RopeType::kYarn);
  CHECK(c.rope_scaling.factor == 40.0);
  CHECK(c.rope_scaling.mscale == 1.0);
  CHECK(c.rope_scaling.mscale_all_dim == 1.0);
  CHECK(c.rope_scaling.beta_fast == 32.0);
  CHECK(c.rope_scaling.beta_slow == 1.0);
  CHECK(c.rope_scaling.original_max_position_embeddings == 4096);
  RopeFrequencies f = compute_rope_frequencies(c);
  CHECK(f.attention_factor == 1.0);
  CHECK(f.inv_freq.size() == 32);
  CHECK(f.inv_freq[31] == Approx(std::pow(10000.0, -62.0 / 64) / 40).epsilon(1e-14));
  // rope_interleave: false switches the pairing back.
  std::string text = cfg::kDeepSeekV3;
  text.insert(1, R"("rope_interleave": false, )");
  CHECK(rope_config_from_json(text).pair_layout == PairLayout::kHalf);
}

TEST_CASE("config.json variants: nulls, new spelling, NeoX, partial rotary, text_config",
          "[rope][json]") {
  SECTION("rope_scaling: null is the default schedule") {
    RopeConfig c = rope_config_from_json(minimal(R"("rope_scaling": null, "rope_theta": 1e6)"));
    CHECK(c.rope_scaling.rope_type == RopeType::kDefault);
    CHECK(c.rope_theta == 1e6);
    CHECK(c.head_dim == 128);
  }
  SECTION("rope_theta absent is 10000") {
    CHECK(rope_config_from_json(minimal("")).rope_theta == 10000.0);
  }
  SECTION("rope_parameters with rope_theta inside wins over a top-level one") {
    RopeConfig c = rope_config_from_json(minimal(
        R"("rope_theta": 1.0e4, "rope_parameters": {"rope_type": "default", "rope_theta": 5e5})"));
    CHECK(c.rope_theta == 5e5);
  }
  SECTION("rope_scaling wins over rope_parameters when both are given, as in transformers") {
    RopeConfig c =
        rope_config_from_json(minimal(R"("rope_scaling": {"type": "linear", "factor": 2}, )"
                                      R"("rope_parameters": {"rope_type": "default"})"));
    CHECK(c.rope_scaling.rope_type == RopeType::kLinear);
    CHECK(c.rope_scaling.factor == 2.0);
    // An empty rope_scaling ({}) does not hide rope_parameters.
    RopeConfig d = rope_config_from_json(
        minimal(R"("rope_scaling": {}, "rope_parameters": {"rope_type": "linear", "factor": 3})"));
    CHECK(d.rope_scaling.factor == 3.0);
  }
  SECTION("dynamic, with integers where floats are usual") {
    RopeConfig c =
        rope_config_from_json(minimal(R"("rope_scaling": {"type": "dynamic", "factor": 2})"));
    CHECK(c.rope_scaling.rope_type == RopeType::kDynamic);
    CHECK(c.rope_scaling.factor == 2.0);
    CHECK(rope_policy_from_json(minimal(R"("rope_scaling": {"type": "dynamic", "factor": 2})"))
              .depends_on_length());
  }
  SECTION("integers may be written as 4096.0") {
    RopeConfig c = rope_config_from_json(
        R"({"head_dim": 128.0, "max_position_embeddings": 4096.0, "rope_scaling": {"rope_type":
        "yarn", "factor": 4, "original_max_position_embeddings": 1024.0, "truncate": false}})");
    CHECK(c.head_dim == 128);
    CHECK(c.max_position_embeddings == 4096);
    CHECK(c.rope_scaling.original_max_position_embeddings == 1024);
    CHECK(c.rope_scaling.truncate == false);
  }
  SECTION("yarn truncate: null means false, as transformers' get(\"truncate\", True) reads it") {
    RopeConfig c = rope_config_from_json(
        minimal(R"("rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": null})"));
    CHECK(c.rope_scaling.truncate == false);
  }
  SECTION("yarn factor null falls back to the ratio of the lengths") {
    RopeConfig c =
        rope_config_from_json(minimal(R"("rope_scaling": {"rope_type": "yarn", "factor": null, )"
                                      R"("original_max_position_embeddings": 2048})"));
    CHECK_FALSE(c.rope_scaling.factor);
    CHECK(compute_rope_frequencies(c).attention_factor ==
          Approx(0.1 * std::log(4.0) + 1).epsilon(1e-15));
  }
  SECTION("GPT-NeoX: rotary_pct and rotary_emb_base") {
    RopeConfig c = rope_config_from_json(
        R"({"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 8,
            "max_position_embeddings": 2048, "rotary_pct": 0.25, "rotary_emb_base": 10000})");
    CHECK(c.head_dim == 64);
    CHECK(c.partial_rotary_factor == 0.25);
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.pair_layout == PairLayout::kHalf);
    CHECK(compute_rope_frequencies(c).rotary_dim == 16);
  }
  SECTION("partial_rotary_factor at the top level or inside rope_parameters") {
    RopeConfig c = rope_config_from_json(
        R"({"hidden_size": 2560, "num_attention_heads": 32, "partial_rotary_factor": 0.4})");
    CHECK(c.head_dim == 80);
    CHECK(compute_rope_frequencies(c).rotary_dim == 32);
    RopeConfig d =
        rope_config_from_json(R"({"head_dim": 80, "rope_parameters": )"
                              R"({"rope_type": "default", "partial_rotary_factor": 0.4}})");
    CHECK(d.partial_rotary_factor == 0.4);
  }
  SECTION("a nested text_config is read when the top level has no attention fields") {
    std::string llava = R"({"model_type": "llava", "image_token_index": 32000,
        "vision_config": {"hidden_size": 1024, "num_attention_heads": 16,
                          "model_type": "clip_vision_model"},
        "text_config": )" +
                        std::string(cfg::kLlama31_8B) + "}";
    CHECK(same_config(rope_config_from_json(llava), rope_config_from_json(cfg::kLlama31_8B)));
    CHECK_THROWS_WITH(
        rope_config_from_json(R"({"model_type": "x", "text_config": {"hidden_size": 64}})"),
        Catch::Contains("missing field \"text_config.num_attention_heads\""));
  }
}

TEST_CASE("from_json errors name the field or value", "[rope][json][error]") {
  // `locate`: a snippet of `text` whose byte offset replaces '@' in the expected message.
  struct Case {
    std::string text;
    std::string message;
    std::string locate = {};
  };
  const Case cases[] = {
      {minimal(R"("rope_scaling": {"rope_type": "mrope", "factor": 2})"),
       "rope_config_from_json: \"rope_scaling.rope_type\": parse_rope_type: rope_type \"mrope\""},
      {minimal(R"("rope_parameters": {"type": "ntk-by-parts"})"), "rope_type \"ntk-by-parts\""},
      {R"({"max_position_embeddings": 4096})", "missing field \"hidden_size\""},
      {R"({"hidden_size": 4096})", "missing field \"num_attention_heads\""},
      {R"({"model_type": "gptj", "n_embd": 4096})", "missing field \"n_head\""},
      {minimal(R"("rope_scaling": {"rope_type": "linear"})"),
       "missing field \"rope_scaling.factor\", which rope_type linear needs"},
      {minimal(R"("rope_scaling": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 4})"),
       "missing field \"rope_scaling.low_freq_factor\""},
      {minimal(R"("rope_scaling": {"rope_type": "llama3", "factor": null, )"
               R"("low_freq_factor": 1, "high_freq_factor": 4})"),
       "missing field \"rope_scaling.factor\""},
      {minimal(R"("rope_parameters": {"rope_type": "longrope", "short_factor": [1]})"),
       "missing field \"rope_parameters.long_factor\""},
      {minimal(R"("rope_scaling": {"rope_type": "yarn"})"),
       "missing field \"rope_scaling.factor\""},
      {R"({"head_dim": 64, "rope_scaling": {"type": "dynamic", "factor": 2.0}})",
       "missing field \"max_position_embeddings\", which rope_type dynamic needs"},
      {minimal(R"("rope_theta": "10000")"),
       "\"rope_theta\" (at byte @) is a string, expected a number", R"("10000")"},
      {minimal(R"("rope_scaling": {"rope_type": "linear", "factor": "2"})"),
       "\"rope_scaling.factor\" (at byte @) is a string, expected a number", R"("2")"},
      {minimal(R"("rope_scaling": "linear")"),
       "\"rope_scaling\" (at byte @) is a string, expected an object", R"("linear")"},
      {minimal(R"("rope_scaling": {"rope_type": "longrope", )"
               R"("short_factor": [1, "x"], "long_factor": []})"),
       "\"rope_scaling.short_factor[1]\" (at byte @) is a string, expected a number", R"("x")"},
      {minimal(R"("rope_scaling": {"rope_type": "yarn", "factor": 4, "truncate": 0})"),
       "\"rope_scaling.truncate\" (at byte @) is a number, expected a boolean", R"(0})"},
      {R"({"head_dim": 128.5})", "\"head_dim\" is 128.5, expected an integer"},
      {R"({"head_dim": 9223372036854775808})",
       "\"head_dim\" is 9223372036854775808, expected an integer of magnitude below 2^62"},
      {minimal(R"("rope_scaling": {"rope_type": "a\u0000b"})"),
       "rope_type \"a\\x00b\", expected one of default"},
      {R"({"head_dim": -64})", "\"head_dim\" is -64, expected a positive dimension"},
      {R"({"hidden_size": 100, "num_attention_heads": 3})",
       "\"hidden_size\" 100 is not a multiple of \"num_attention_heads\" 3"},
      {minimal(R"("rope_scaling": {"rope_type": "yarn", "factor": 4, )"
               R"("original_max_position_embeddings": 4096.5})"),
       "\"rope_scaling.original_max_position_embeddings\" is 4096.5, expected an integer"},
      {minimal(R"("model_type": 7)"), "\"model_type\" (at byte @) is a number, expected a string",
       R"(7})"},
      {R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 512})",
       "\"rotary_dim\" 512, expected <= the head dimension 256"},
      {minimal(R"("rope_parameters": {"full_attention": {"rope_type": "default"}, )"
               R"("sliding_attention": {"rope_type": "default"}})"),
       "holds one object per layer type (full_attention, sliding_attention)"},
      {minimal(R"("rope_theta": 0.5)"), "RopeConfig: rope_theta 0.5"},
      {minimal(R"("partial_rotary_factor": 2)"), "partial_rotary_factor 2"},
      {minimal(
           R"("rope_scaling": {"rope_type": "longrope", "short_factor": [1], "long_factor": [1]})"),
       "short_factor has 1 entries, expected rotary_dim / 2 = 64"},
      {"[]", "rope_config_from_json: the document is an array, expected an object"},
      {R"({"head_dim": 64,})", "json: byte 16 (line 1, column 17): expected a string key"},
      {R"({"text_config": 3})", "\"text_config\" (at byte @) is a number, expected an object",
       R"(3})"},
  };
  for (const Case& c : cases) {
    std::string message = c.message;
    if (!c.locate.empty()) {
      std::size_t at = c.text.find(c.locate);
      REQUIRE(at != std::string::npos);
      message.replace(message.find('@'), 1, std::to_string(at));
    }
    INFO("input: " << c.text);
    CHECK_THROWS_AS(rope_config_from_json(c.text), Error);
    CHECK_THROWS_WITH(rope_config_from_json(c.text), Catch::Contains(message));
  }
}

TEST_CASE("load_rope_config reads a file and names it in errors", "[rope][json]") {
  auto dir = std::filesystem::temp_directory_path() / "lazyattn_rope_test";
  std::filesystem::create_directories(dir);
  auto good = dir / "config.json";
  auto broken = dir / "broken.json";
  {
    std::ofstream(good) << cfg::kPhi3_128k;
    std::ofstream(broken) << R"({"hidden_size": 3072, "num_attention_heads": )";
  }
  CHECK(same_config(load_rope_config(good.string()), rope_config_from_json(cfg::kPhi3_128k)));
  CHECK_THROWS_WITH(
      load_rope_config(broken.string()),
      Catch::Contains("load_rope_config(\"" + broken.string() + "\"): json: byte 45"));
  auto missing = (dir / "no_such_file.json").string();
  CHECK_THROWS_WITH(load_rope_config(missing),
                    Catch::Contains("load_rope_config: cannot open \"" + missing + "\""));
  CHECK_THROWS_AS(load_rope_config(dir.string()), Error);
  CHECK_THROWS_WITH(load_rope_config(dir.string()),
                    Catch::Contains("\"" + dir.string() + "\" is a directory, expected a config"));
  std::filesystem::remove_all(dir);
}
