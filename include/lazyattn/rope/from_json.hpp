// Reading a Hugging Face config.json into a RopeConfig / RopePolicy, both the old `rope_scaling`
// spelling and transformers 5's `rope_parameters`.
//
// Which fields are read, in the order they are looked up (the first present, non-null one wins):
//   head_dim      qk_rope_head_dim (MLA models: DeepSeek-V2/V3 rotate only that part), head_dim,
//                 hidden_size / num_attention_heads (GPT-J / CodeGen: n_embd / n_head)
//   rope_theta    rope_scaling/rope_parameters.rope_theta, rope_theta, rotary_emb_base (GPT-NeoX),
//                 else 10000 (transformers' default_theta; a few model classes default otherwise
//                 and then their config.json carries rope_theta anyway)
//   rotary part   partial_rotary_factor (top level, then inside the scaling object), rotary_pct
//                 (GPT-NeoX), rotary_dim (GPT-J / CodeGen, in dimensions), else the whole head
//   max length    max_position_embeddings (GPT-J / CodeGen: n_positions)
//   pairs         rope_interleave if given; else interleaved for gptj, codegen, deepseek_v2,
//                 deepseek_v3 and kimi_k2 (whose transformers configs default rope_interleave to
//                 true), half ("rotate_half") for everything else
//   schedule      rope_scaling if it is a non-empty object, else rope_parameters (transformers lets
//                 the old spelling win when both are given); rope_type, else the legacy `type`
// When the top level has none of the attention fields and holds a `text_config` object (Llava,
// Mistral3, Gemma3 ...), that object is read instead. null counts as absent throughout, except
// yarn's `truncate`, where transformers' `.get("truncate", True)` turns a null into "don't".
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lazyattn/detail/json.hpp"
#include "lazyattn/error.hpp"
#include "lazyattn/rope/config.hpp"
#include "lazyattn/rope/frequencies.hpp"
#include "lazyattn/rope/policy.hpp"
#include "lazyattn/rope/types.hpp"

namespace lazyattn {
namespace detail {

class RopeJsonReader {
 public:
  RopeConfig read(const json::Value& document) {
    LAZYATTN_CHECK(document.kind == json::Kind::kObject, kWhere, ": the document is ",
                   json::to_string(document.kind), ", expected an object (a config.json)");
    const json::Value* root = &document;
    if (!has_attention_fields(*root)) {
      if (const json::Value* text = field(*root, "text_config")) {
        expect_kind(*text, json::Kind::kObject, "text_config");
        root = text;
        prefix_ = "text_config.";
      }
    }
    RopeConfig c;
    std::string model_type;
    if (const json::Value* v = field(*root, "model_type")) model_type = string_of(*v, "model_type");
    const bool gptj_like = model_type == "gptj" || model_type == "codegen";
    c.head_dim = read_head_dim(*root, gptj_like);

    const json::Value* scaling = read_scaling_object(*root);
    c.rope_theta = read_theta(*root, scaling);
    c.partial_rotary_factor = read_partial(*root, scaling, gptj_like, c.head_dim);

    const char* max_name = "max_position_embeddings";
    const json::Value* max_pos = field(*root, max_name);
    if (!max_pos && gptj_like) {
      max_name = "n_positions";
      max_pos = field(*root, max_name);
    }
    if (max_pos) c.max_position_embeddings = integer_of(*max_pos, max_name);
    if (const json::Value* v = field(*root, "original_max_position_embeddings")) {
      c.original_max_position_embeddings = integer_of(*v, "original_max_position_embeddings");
    }

    if (const json::Value* v = field(*root, "rope_interleave")) {
      c.pair_layout = bool_of(*v, "rope_interleave") ? PairLayout::kInterleaved : PairLayout::kHalf;
    } else if (gptj_like || model_type == "deepseek_v2" || model_type == "deepseek_v3" ||
               model_type == "kimi_k2") {
      c.pair_layout = PairLayout::kInterleaved;
    }

    if (scaling) read_scaling(*scaling, c);
    if (c.rope_scaling.rope_type == RopeType::kDynamic && !max_pos) missing(max_name, "dynamic");
    check_rope_config(c);
    return c;
  }

 private:
  static constexpr const char* kWhere = "rope_config_from_json";
  std::string prefix_;          // "" or "text_config."
  std::string scaling_prefix_;  // "rope_scaling." or "rope_parameters."

  std::string path(std::string_view name) const { return concat(prefix_, name); }

  // The member `name` of `obj`, or nullptr when it is absent or null.
  static const json::Value* field(const json::Value& obj, std::string_view name) {
    const json::Value* v = obj.find(name);
    return v == nullptr || v->is_null() ? nullptr : v;
  }

  static bool has_attention_fields(const json::Value& obj) {
    for (const char* name : {"head_dim", "hidden_size", "num_attention_heads", "n_embd", "n_head",
                             "qk_rope_head_dim"}) {
      if (field(obj, name)) return true;
    }
    return false;
  }

  [[noreturn]] void missing(std::string_view name, std::string_view rope_type) const {
    throw_error(kWhere, ": missing field \"", path(name), "\", which rope_type ", rope_type,
                " needs");
  }

  void expect_kind(const json::Value& v, json::Kind kind, std::string_view name) const {
    LAZYATTN_CHECK(v.kind == kind, kWhere, ": \"", path(name), "\" (at byte ", v.begin, ") is ",
                   json::to_string(v.kind), ", expected ", json::to_string(kind));
  }

  // A number as a message shows it: integral values in full ("9223372036854775808", not
  // "9.22337e+18"), others to the digits that give them back.
  static std::string number_text(double x) {
    char buf[400];
    if (std::isfinite(x) && std::nearbyint(x) == x && std::fabs(x) < 1e300) {
      std::snprintf(buf, sizeof buf, "%.0f", x);
    } else {
      std::snprintf(buf, sizeof buf, "%.17g", x);
    }
    return buf;
  }

  double number_of(const json::Value& v, std::string_view name) const {
    expect_kind(v, json::Kind::kNumber, name);
    return v.number;
  }

  // Integers may be written as 4096 or 4096.0 (Python's json writes whatever type the value had).
  std::int64_t integer_of(const json::Value& v, std::string_view name) const {
    expect_kind(v, json::Kind::kNumber, name);
    if (v.is_integer) return v.integer;
    LAZYATTN_CHECK(std::nearbyint(v.number) == v.number && std::fabs(v.number) < 0x1p62, kWhere,
                   ": \"", path(name), "\" is ", number_text(v.number),
                   ", expected an integer of magnitude below 2^62");
    return static_cast<std::int64_t>(v.number);
  }

  int int_of(const json::Value& v, std::string_view name) const {
    std::int64_t i = integer_of(v, name);
    LAZYATTN_CHECK(i > 0 && i <= (1 << 20), kWhere, ": \"", path(name), "\" is ", i,
                   ", expected a positive dimension <= 1048576");
    return static_cast<int>(i);
  }

  bool bool_of(const json::Value& v, std::string_view name) const {
    expect_kind(v, json::Kind::kBool, name);
    return v.boolean;
  }

  std::string string_of(const json::Value& v, std::string_view name) const {
    expect_kind(v, json::Kind::kString, name);
    return v.string;
  }

  std::vector<double> numbers_of(const json::Value& v, std::string_view name) const {
    expect_kind(v, json::Kind::kArray, name);
    std::vector<double> out;
    out.reserve(v.array.size());
    for (std::size_t i = 0; i < v.array.size(); ++i) {
      out.push_back(number_of(v.array[i], concat(name, "[", i, "]")));
    }
    return out;
  }

  int read_head_dim(const json::Value& root, bool gptj_like) const {
    if (const json::Value* v = field(root, "qk_rope_head_dim")) {
      return int_of(*v, "qk_rope_head_dim");
    }
    if (const json::Value* v = field(root, "head_dim")) return int_of(*v, "head_dim");
    const char* hidden_name = gptj_like ? "n_embd" : "hidden_size";
    const char* heads_name = gptj_like ? "n_head" : "num_attention_heads";
    const json::Value* hidden = field(root, hidden_name);
    const json::Value* heads = field(root, heads_name);
    if (!hidden || !heads) {
      throw_error(kWhere, ": missing field \"", path(!hidden ? hidden_name : heads_name),
                  "\": the head dimension comes from \"", path("head_dim"), "\" or from \"",
                  path(hidden_name), "\" / \"", path(heads_name), "\"");
    }
    int h = int_of(*hidden, hidden_name);
    int n = int_of(*heads, heads_name);
    // transformers floors the quotient; a remainder means head_dim is really given elsewhere.
    LAZYATTN_CHECK(h % n == 0, kWhere, ": \"", path(hidden_name), "\" ", h,
                   " is not a multiple of \"", path(heads_name), "\" ", n,
                   ", expected \"head_dim\" to be given");
    return h / n;
  }

  const json::Value* read_scaling_object(const json::Value& root) {
    const json::Value* scaling = nullptr;
    if (const json::Value* v = field(root, "rope_scaling")) {
      expect_kind(*v, json::Kind::kObject, "rope_scaling");
      if (!v->object.empty()) {
        scaling = v;
        scaling_prefix_ = "rope_scaling.";
      }
    }
    if (!scaling) {
      if (const json::Value* v = field(root, "rope_parameters")) {
        expect_kind(*v, json::Kind::kObject, "rope_parameters");
        scaling = v;
        scaling_prefix_ = "rope_parameters.";
      }
    }
    if (scaling && !scaling->object.empty()) {
      // Models with different RoPE per layer type nest one object per type ({"full_attention":
      // {...}, "sliding_attention": {...}}); which one applies is the caller's choice.
      bool nested = true;
      for (const json::Member& m : scaling->object) {
        nested = nested && m.value.kind == json::Kind::kObject;
      }
      if (nested) {
        std::string keys;
        for (const json::Member& m : scaling->object) {
          keys += concat(keys.empty() ? "" : ", ", m.key);
        }
        throw_error(kWhere, ": \"", path(scaling_prefix_.substr(0, scaling_prefix_.size() - 1)),
                    "\" holds one object per layer type (", keys,
                    "), expected a single schedule; pass that layer type's object instead");
      }
    }
    return scaling;
  }

  double read_theta(const json::Value& root, const json::Value* scaling) const {
    if (scaling) {
      if (const json::Value* v = field(*scaling, "rope_theta")) {
        return number_of(*v, scaling_prefix_ + "rope_theta");
      }
    }
    if (const json::Value* v = field(root, "rope_theta")) return number_of(*v, "rope_theta");
    if (const json::Value* v = field(root, "rotary_emb_base")) {
      return number_of(*v, "rotary_emb_base");
    }
    return 10000.0;
  }

  double read_partial(const json::Value& root, const json::Value* scaling, bool gptj_like,
                      int head_dim) const {
    if (const json::Value* v = field(root, "partial_rotary_factor")) {
      return number_of(*v, "partial_rotary_factor");
    }
    if (scaling) {
      if (const json::Value* v = field(*scaling, "partial_rotary_factor")) {
        return number_of(*v, scaling_prefix_ + "partial_rotary_factor");
      }
    }
    if (const json::Value* v = field(root, "rotary_pct")) return number_of(*v, "rotary_pct");
    if (gptj_like) {
      if (const json::Value* v = field(root, "rotary_dim")) {
        int rotary_dim = int_of(*v, "rotary_dim");
        LAZYATTN_CHECK(rotary_dim <= head_dim, kWhere, ": \"", path("rotary_dim"), "\" ",
                       rotary_dim, ", expected <= the head dimension ", head_dim);
        // RopeConfig keeps a fraction; make sure int(head_dim * fraction) gives rotary_dim back.
        double partial = static_cast<double>(rotary_dim) / head_dim;
        while (static_cast<int>(head_dim * partial) < rotary_dim) {
          partial = std::nextafter(partial, 2.0);
        }
        return partial;
      }
    }
    return 1.0;
  }

  void read_scaling(const json::Value& s, RopeConfig& c) const {
    const std::string& sp = scaling_prefix_;
    std::string type_name = "default";
    if (const json::Value* v = field(s, "rope_type")) {
      type_name = string_of(*v, sp + "rope_type");
    } else if (const json::Value* v = field(s, "type")) {
      type_name = string_of(*v, sp + "type");
    }
    RopeType type{};
    try {
      type = parse_rope_type(type_name);
    } catch (const Error& e) {
      throw_error(kWhere, ": \"", path(sp), "rope_type\": ", e.what());
    }
    RopeScaling& r = c.rope_scaling;
    r.rope_type = type;
    auto number = [&](const char* name) -> std::optional<double> {
      if (const json::Value* v = field(s, name)) return number_of(*v, sp + name);
      return std::nullopt;
    };
    r.factor = number("factor");
    r.low_freq_factor = number("low_freq_factor");
    r.high_freq_factor = number("high_freq_factor");
    r.beta_fast = number("beta_fast");
    r.beta_slow = number("beta_slow");
    r.mscale = number("mscale");
    r.mscale_all_dim = number("mscale_all_dim");
    r.attention_factor = number("attention_factor");
    if (const json::Value* v = field(s, "original_max_position_embeddings")) {
      r.original_max_position_embeddings = integer_of(*v, sp + "original_max_position_embeddings");
    }
    if (const json::Value* v = s.find("truncate")) {
      r.truncate = v->is_null() ? false : bool_of(*v, sp + "truncate");
    }
    if (const json::Value* v = field(s, "short_factor")) {
      r.short_factor = numbers_of(*v, sp + "short_factor");
    }
    if (const json::Value* v = field(s, "long_factor")) {
      r.long_factor = numbers_of(*v, sp + "long_factor");
    }

    // Fields transformers indexes without a default (a KeyError there) are required here.
    auto t = to_string(type);
    auto require = [&](const char* name) {
      if (s.find(name) == nullptr || (field(s, name) == nullptr && type != RopeType::kYarn)) {
        missing(sp + name, t);
      }
    };
    switch (type) {
      case RopeType::kDefault: break;
      case RopeType::kLinear:
      case RopeType::kDynamic:
      case RopeType::kYarn: require("factor"); break;  // yarn allows null: the length ratio
      case RopeType::kLlama3:
        require("factor");
        require("low_freq_factor");
        require("high_freq_factor");
        break;
      case RopeType::kLongrope:
        require("short_factor");
        require("long_factor");
        break;
    }
  }
};

}  // namespace detail

// The RoPE part of a Hugging Face config.json (see the header comment for the fields read).
// Throws lazyattn::Error for malformed JSON (naming the byte offset), a missing required field
// (naming it), an unknown rope_type (naming it) and any value RopeConfig cannot take.
inline RopeConfig rope_config_from_json(std::string_view json_text) {
  detail::json::Value document = detail::json::parse(json_text);
  return detail::RopeJsonReader().read(document);
}

inline RopePolicy rope_policy_from_json(std::string_view json_text) {
  return RopePolicy(rope_config_from_json(json_text));
}

// Reads the file at `path` (a config.json) and parses it as rope_config_from_json does; errors
// are prefixed with the path.
inline RopeConfig load_rope_config(const std::string& path) {
  std::error_code ec;
  LAZYATTN_CHECK(!std::filesystem::is_directory(path, ec), "load_rope_config: \"", path,
                 "\" is a directory, expected a config.json file");
  std::ifstream in(path, std::ios::binary);
  LAZYATTN_CHECK(in.good(), "load_rope_config: cannot open \"", path, "\"");
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure& e) {
    detail::throw_error("load_rope_config: error reading \"", path, "\": ", e.what());
  }
  LAZYATTN_CHECK(!in.bad(), "load_rope_config: error reading \"", path, "\"");
  try {
    return rope_config_from_json(text);
  } catch (const Error& e) {
    detail::throw_error("load_rope_config(\"", path, "\"): ", e.what());
  }
}

}  // namespace lazyattn
