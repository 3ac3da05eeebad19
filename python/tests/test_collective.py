"""The tensor-parallel store's agreement step (lazyattn._collective.Group) over two real ranks:
gloo processes on the CPU, so it runs on a machine with one GPU or none (test_tp.py runs the
store itself under torchrun, over as many ranks as there are GPUs). Equal values pass; values
that differ on one rank, or an error on one rank, raise RankError on both ranks, naming that
rank (and its message), in the same call.

    python3 -m pytest python/tests/test_collective.py -q

It loads lazyattn/_collective.py alone, so it needs only torch with gloo: Debian's python3-torch
(1.13, CPU) runs it too (`/usr/bin/python3 -m pytest python/tests/test_collective.py`).
"""
import importlib.util
import json
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

# The module alone (lazyattn/__init__.py needs torch.library's custom ops and the library): it
# needs only torch.distributed, so this test runs under any torch with gloo, GPU or not.
_spec = importlib.util.spec_from_file_location(
    "lazyattn_collective", os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "lazyattn", "_collective.py"))
_collective = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_collective)
RankError = _collective.RankError


def _rank(rank, world, init, out):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    g = _collective.Group(dist.group.WORLD, torch.device("cpu"))
    seen = []

    def expect(case, fn):
        try:
            fn()
        except RankError as e:
            seen.append({"case": case, "ranks": e.ranks, "messages": e.messages, "text": str(e)})
        else:
            seen.append({"case": case, "ranks": None})

    # The same values everywhere, unsigned 64-bit ones included: no error.
    key = [5, 2 ** 64 - 1, 2 ** 63]
    expect("same", lambda: g.exchange("same", None, [("key", 3, key)]))
    # The last rank's second item differs: both ranks raise, naming it.
    other = [7] if rank == world - 1 else [6]
    expect("differs", lambda: g.exchange("differs", None, [("key", 3, key),
                                                           ("layout", 1, other)]))
    # The last rank failed its step (no values): both raise with its message.
    err = ValueError("bad ids on rank %d" % rank) if rank == world - 1 else None
    expect("fails", lambda: g.exchange("fails", err, [("key", 3, None if err else key)]))
    # attempt(): the step's exception handed to the exchange under a group.
    _, err = _collective.attempt(g, lambda: int("x%d" % rank))
    expect("attempt", lambda: g.exchange("attempt", err, [("n", 1, None)]))
    # agree() without values, nobody failed.
    expect("agree", lambda: g.agree("agree", None))
    # digest(): equal for equal parts, different otherwise, on every rank.
    seen.append({"case": "digest", "equal": _collective.digest([1, 2], "a") ==
                 _collective.digest([1, 2], "a"),
                 "differs": _collective.digest([1, 2]) != _collective.digest([2, 1])})
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(seen, f)
    dist.barrier()  # both ranks done before either tears gloo down (else one may abort at exit)
    dist.destroy_process_group()


def test_exchange_over_two_gloo_ranks(tmp_path):
    world = 2
    init = "file://" + str(tmp_path / "rendezvous")
    mp.spawn(_rank, args=(world, init, str(tmp_path)), nprocs=world, join=True)
    results = [json.load(open(tmp_path / ("rank%d.json" % r))) for r in range(world)]
    for seen in results:
        by = {s["case"]: s for s in seen}
        assert by["same"]["ranks"] is None
        assert by["agree"]["ranks"] is None
        assert by["differs"]["ranks"] == [1]
        assert "rank 1 gave a different layout than rank 0" in by["differs"]["text"]
        assert by["fails"]["ranks"] == [1]
        assert by["fails"]["messages"] == ["ValueError: bad ids on rank 1"]
        assert "failed on 1 of 2 ranks" in by["fails"]["text"]
        assert by["digest"]["equal"] and by["digest"]["differs"]
        assert by["attempt"]["ranks"] == [0, 1]
        assert by["attempt"]["messages"][1].startswith("ValueError: invalid literal")


def test_attempt_without_a_group_raises():
    assert _collective.attempt(None, lambda: 7) == (7, None)
    with pytest.raises(ZeroDivisionError):
        _collective.attempt(None, lambda: 1 // 0)
