"""lazyattn.hf under transformers' tensor parallelism (tp_plan="auto", torchrun, NCCL): each rank's
pool holds its KV heads' pages, every rank makes the same cache decisions, bad input on one rank
fails the call on every rank, and the greedy tokens equal the one-GPU run's. One torchrun per
tensor-parallel size this machine has GPUs for (1, 2 and 4; the one-rank run takes the same code
path: process group, collective checks, the model split by transformers' plan). Needs CUDA GPUs,
torch and transformers:

    python3 -m pytest python/tests/test_tp.py -q
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [n for n in (1, 2, 4) if n <= torch.cuda.device_count()]


def report(line):
    print(line)
    path = os.environ.get("LAZYATTN_TEST_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A small random Llama (8 query heads, 4 KV heads: splits over 1, 2 and 4 ranks), saved."""
    config = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024,
                         num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=4,
                         head_dim=64, max_position_embeddings=8192, bos_token_id=1,
                         eos_token_id=2, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # peaked logits: greedy choices well apart from rounding
    path = tmp_path_factory.mktemp("tp_model")
    model.to(torch.bfloat16).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("size", SIZES)
def test_tensor_parallel(model_dir, tmp_path, size):
    torchrun = shutil.which("torchrun")
    cmd = ([torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]) + [
        "--standalone", "--nproc_per_node=%d" % size,
        os.path.join(HERE, "tp_worker.py"), model_dir, str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, "torchrun (%d ranks) failed:\n%s\n%s" % (
        size, run.stdout[-4000:], run.stderr[-8000:])
    ranks = [json.load(open(os.path.join(tmp_path, "rank%d.json" % r))) for r in range(size)]
    for r, found in enumerate(ranks):
        assert found["tp_size"] == size and found["tp_rank"] == r
        assert found["pool_kv_heads"] == 4 // size and found["qo_heads"] == 8 // size
        assert found["kv_heads"] == [r * 4 // size, (r + 1) * 4 // size]
        assert found["tokens"] == ranks[0]["tokens"]
        assert [c["case"] for c in found["checks"]] == [c["case"] for c in ranks[0]["checks"]]
    assert ranks[0]["same_tokens"], (ranks[0]["tokens"], ranks[0]["tokens_one_gpu"])
    cases = [c["case"] for c in ranks[0]["checks"]]
    assert ("the encode fails" in cases) == (size == 1)
    assert len(cases) == (3 if size == 1 else 5)
    report("tensor parallel %d: tokens %s equal the one-GPU run's; RankError on every rank for: "
           "%s" % (size, ranks[0]["tokens"], "; ".join(cases)))
