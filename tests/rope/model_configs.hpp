// Real model config.json texts (RoPE-relevant fields verbatim, the rest trimmed only where noted)
// and one RopeConfig per schedule, shared by the RoPE tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lazyattn/rope.hpp"

namespace lazyattn::test::rope {

// meta-llama/Llama-3.1-8B config.json.
inline constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// The same model as transformers 5 saves it: `rope_parameters`, with rope_theta moved inside and
// the emptied top-level fields written as null.
inline constexpr const char* kLlama31_8B_v5 = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "head_dim": 128,
  "rope_scaling": null,
  "rope_theta": null,
  "partial_rotary_factor": null,
  "original_max_position_embeddings": null,
  "rope_parameters": {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_theta": 500000.0
  },
  "transformers_version": "5.17.0",
  "vocab_size": 128256
})";

// meta-llama/Llama-3.2-1B config.json.
inline constexpr const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// Qwen/Qwen2.5-7B-Instruct config.json with the YaRN block its model card says to add for
// contexts past 32768 (legacy `type` key).
inline constexpr const char* kQwen25_7B_Yarn = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 3584,
  "initializer_range": 0.02,
  "intermediate_size": 18944,
  "max_position_embeddings": 32768,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "rope_scaling": {
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
    "type": "yarn"
  },
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 152064
})";

// mistralai/Mistral-7B-v0.1 config.json (no rope_scaling field at all).
inline constexpr const char* kMistral7B = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// EleutherAI/gpt-j-6b config.json: GPT-2 field names, interleaved pairs, 64 of 256 dims rotate.
inline constexpr const char* kGptJ6B = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPTJForCausalLM"],
  "attn_pdrop": 0.0,
  "bos_token_id": 50256,
  "embd_pdrop": 0.0,
  "eos_token_id": 50256,
  "gradient_checkpointing": false,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gptj",
  "n_embd": 4096,
  "n_head": 16,
  "n_inner": null,
  "n_layer": 28,
  "n_positions": 2048,
  "resid_pdrop": 0.0,
  "rotary": true,
  "rotary_dim": 64,
  "scale_attn_weights": true,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {
    "text-generation": {"do_sample": true, "max_length": 50, "temperature": 1.0}
  },
  "tie_word_embeddings": false,
  "tokenizer_class": "GPT2Tokenizer",
  "transformers_version": "4.18.0.dev0",
  "use_cache": true,
  "vocab_size": 50400
})";

// A Phi-3 128k config.json (microsoft/Phi-3-vision-128k-instruct's, as quoted in diffusers'
// OmniGen tests): longrope under its legacy name "su", original length at the top level, and no
// factor, so the factor is 131072 / 4096 = 32. The factor lists are the published ones.
inline constexpr const char* kPhi3_128k = R"({
  "_name_or_path": "Phi-3-vision-128k-instruct",
  "architectures": ["Phi3ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 3072,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "long_factor": [
      1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
      1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
      1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
      3.68999981880188, 5.419999599456787, 5.489999771118164, 5.489999771118164,
      9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
      15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
      30.009998321533203, 32.35000228881836, 32.590003967285156, 35.56000518798828,
      39.95000457763672, 53.840003967285156, 56.20000457763672, 57.95000457763672,
      59.29000473022461, 59.77000427246094, 59.920005798339844, 61.190006256103516,
      61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
      63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922,
      64.760009765625, 64.80001068115234, 64.81001281738281, 64.81001281738281
    ],
    "short_factor": [
      1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
      1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
      1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996,
      2.3499999999999996, 2.3499999999999996, 2.3499999999999996, 2.3999999999999995,
      2.3999999999999995, 2.6499999999999986, 2.6999999999999984, 2.8999999999999977,
      2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997
    ],
    "type": "su"
  },
  "rope_theta": 10000.0,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.38.1",
  "use_cache": true,
  "vocab_size": 32064
})";

// deepseek-ai/DeepSeek-V3 config.json (auto_map and quantization_config kept; integers where the
// file has them: factor 40, rope_theta 10000). RoPE covers only the 64 qk_rope_head_dim dims.
inline constexpr const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "auto_map": {
    "AutoConfig": "configuration_deepseek.DeepseekV3Config",
    "AutoModel": "modeling_deepseek.DeepseekV3Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM"
  },
  "aux_loss_alpha": 0.001,
  "bos_token_id": 0,
  "eos_token_id": 1,
  "ep_size": 1,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "initializer_range": 0.02,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "pretraining_tp": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "quantization_config": {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "weight_block_size": [128, 128]
  },
  "rms_norm_eps": 1e-06,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "routed_scaling_factor": 2.5,
  "scoring_func": "sigmoid",
  "seq_aux": true,
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1",
  "use_cache": true,
  "v_head_dim": 128,
  "vocab_size": 129280
})";

// One configuration per schedule (and per pairing / partial-rotary variant), with the request
// length at which to evaluate it.
struct NamedSchedule {
  std::string name;
  RopeConfig config;
  std::int64_t seq_len = 0;
};

inline std::vector<NamedSchedule> all_schedules() {
  std::vector<NamedSchedule> out;
  RopeConfig plain;
  plain.head_dim = 128;
  plain.rope_theta = 10000.0;
  plain.max_position_embeddings = 4096;
  out.push_back({"default", plain, 0});

  RopeConfig linear = plain;
  linear.rope_scaling.rope_type = RopeType::kLinear;
  linear.rope_scaling.factor = 4.0;
  out.push_back({"linear", linear, 0});

  RopeConfig dynamic = plain;
  dynamic.rope_scaling.rope_type = RopeType::kDynamic;
  dynamic.rope_scaling.factor = 2.0;
  out.push_back({"dynamic (within max)", dynamic, 4096});
  out.push_back({"dynamic (grown to 2^24)", dynamic, std::int64_t{1} << 24});

  out.push_back({"yarn (Qwen2.5-7B)", rope_config_from_json(kQwen25_7B_Yarn), 0});
  out.push_back({"yarn (DeepSeek-V3, interleaved)", rope_config_from_json(kDeepSeekV3), 0});
  out.push_back({"llama3 (Llama-3.1-8B)", rope_config_from_json(kLlama31_8B), 0});
  out.push_back({"longrope short (Phi-3)", rope_config_from_json(kPhi3_128k), 4096});
  out.push_back({"longrope long (Phi-3)", rope_config_from_json(kPhi3_128k), 131072});
  out.push_back({"partial, interleaved (GPT-J-6B)", rope_config_from_json(kGptJ6B), 0});
  return out;
}

}  // namespace lazyattn::test::rope
