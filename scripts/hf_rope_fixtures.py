#!/usr/bin/env python3
"""Writes tests/data/hf_rope_fixtures.json: RoPE frequencies and cos/sin as transformers computes them.

Runs where transformers and torch are installed (no GPU is needed):
    python3 scripts/hf_rope_fixtures.py tests/data/hf_rope_fixtures.json
Each case builds a model config the way a config.json would give it, instantiates the model's own
rotary-embedding module, runs its forward on the listed positions (and on seq_len - 1, which is what
makes dynamic and longrope pick their frequencies), and records inv_freq, attention_scaling, cos, sin.
"""
import json
import sys

import torch
import transformers
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding


def phi3_like_factors(n, top):
    # Smooth increasing factors, shaped like the published Phi-3 lists (not the real values).
    return [round(1.0 + (top - 1.0) * (i / (n - 1)) ** 2, 6) for i in range(n)]


BASE = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            max_position_embeddings=8192, rope_theta=10000.0)

CASES = [
    ("default_theta1e4_d128", dict(BASE), None),
    ("default_theta5e5_d64", dict(BASE, head_dim=64, rope_theta=500000.0), None),
    ("linear_f4", dict(BASE, rope_scaling={"rope_type": "linear", "factor": 4.0}), None),
    ("dynamic_f2_short", dict(BASE, max_position_embeddings=4096,
                              rope_scaling={"rope_type": "dynamic", "factor": 2.0}), 2048),
    ("dynamic_f2_8k", dict(BASE, max_position_embeddings=4096,
                           rope_scaling={"rope_type": "dynamic", "factor": 2.0}), 8192),
    ("dynamic_f4_20k", dict(BASE, max_position_embeddings=4096,
                            rope_scaling={"rope_type": "dynamic", "factor": 4.0}), 20000),
    ("yarn_qwen25_f4", dict(BASE, rope_theta=1000000.0, max_position_embeddings=32768,
                            rope_scaling={"type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 32768}), None),
    ("yarn_deepseek_mscale", dict(BASE, head_dim=64, max_position_embeddings=163840,
                                  rope_scaling={"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                                "mscale_all_dim": 1.0, "beta_fast": 32,
                                                "beta_slow": 1,
                                                "original_max_position_embeddings": 4096}), None),
    ("yarn_no_truncate_attn", dict(BASE, head_dim=64, rope_theta=150000.0,
                                   max_position_embeddings=131072,
                                   rope_scaling={"rope_type": "yarn", "factor": 32.0,
                                                 "beta_fast": 32.0, "beta_slow": 1.0,
                                                 "truncate": False,
                                                 "original_max_position_embeddings": 4096}), None),
    ("yarn_plain_f8", dict(BASE, max_position_embeddings=16384,
                           rope_scaling={"rope_type": "yarn", "factor": 8.0}), None),
    ("llama31_8b", dict(BASE, rope_theta=500000.0, max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}), None),
    ("llama32_1b", dict(BASE, hidden_size=2048, head_dim=64, rope_theta=500000.0,
                        max_position_embeddings=131072,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192}), None),
    ("longrope_short", dict(BASE, hidden_size=3072, head_dim=96, max_position_embeddings=131072,
                            original_max_position_embeddings=4096,
                            rope_scaling={"type": "longrope",
                                          "short_factor": phi3_like_factors(48, 2.0),
                                          "long_factor": phi3_like_factors(48, 40.0)}), 2048),
    ("longrope_long", dict(BASE, hidden_size=3072, head_dim=96, max_position_embeddings=131072,
                           original_max_position_embeddings=4096,
                           rope_scaling={"type": "longrope",
                                         "short_factor": phi3_like_factors(48, 2.0),
                                         "long_factor": phi3_like_factors(48, 40.0)}), 8192),
    # No partial-rotary case: transformers 5.17's Llama rotary module ignores
    # partial_rotary_factor (it returned 64 frequencies for head_dim 128 at factor 0.5).
]

POSITIONS = [0, 1, 2, 3, 17, 255, 1000, 2047, 4095]


def run_case(name, cfg, seq_len):
    config = LlamaConfig(**cfg)
    module = LlamaRotaryEmbedding(config)
    positions = list(POSITIONS)
    ids = positions + ([seq_len - 1] if seq_len else [])
    x = torch.zeros(1, len(ids), 8, dtype=torch.float32)
    with torch.no_grad():
        cos, sin = module(x, torch.tensor([ids], dtype=torch.long))
    n = len(positions)
    saved = config.to_dict()
    return {
        "name": name,
        "config": cfg,
        "config_saved": json.loads(json.dumps(saved, default=str)),
        "seq_len": seq_len,
        "inv_freq": [float(v) for v in module.inv_freq.double().tolist()],
        "attention_factor": float(module.attention_scaling),
        "positions": positions,
        "cos": cos[0, :n].double().tolist(),
        "sin": sin[0, :n].double().tolist(),
    }


def main():
    out = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "cases": [], "failed": []}
    for name, cfg, seq_len in CASES:
        try:
            out["cases"].append(run_case(name, cfg, seq_len))
            c = out["cases"][-1]
            print(f"{name}: {len(c['inv_freq'])} freqs, attention_factor {c['attention_factor']:.6f}")
        except Exception as e:  # record and go on: one unsupported case must not hide the others
            out["failed"].append({"name": name, "error": repr(e)})
            print(f"{name}: FAILED {e!r}")
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
