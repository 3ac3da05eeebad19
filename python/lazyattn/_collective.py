"""What the ranks of a tensor-parallel model agree on, so that every rank's store makes the same
decisions: each rank holds its KV heads' share of every document in a pool of its own, and the
pools' bookkeeping (keys, pins, tails, eviction) must stay identical.

The bookkeeping is deterministic: pools given the same calls in the same order stay equal
(lazyattn_pool_fingerprint). So the ranks compare what each call is about to do (the document's
key, a request's layout, the question's tokens) and their fingerprints before it changes
anything, and agree on every step a rank could fail alone, before the model's own collectives
run: a rank that raises while the others enter the forward would leave them waiting forever.
"""
import hashlib

import torch
import torch.distributed as dist


class RankError(RuntimeError):
    """Raised on every rank of a tensor-parallel store when any rank failed a call or the ranks
    were given different inputs; `ranks` names the ranks at fault, `messages` their errors."""

    def __init__(self, message, ranks=(), messages=()):
        super().__init__(message)
        self.ranks, self.messages = list(ranks), list(messages)


def _signed(u):
    """A 64-bit unsigned value as the int64 a tensor holds."""
    u &= (1 << 64) - 1
    return u - (1 << 64) if u >= 1 << 63 else u


def digest(*parts):
    """Two int64 words of a 128-bit hash of `parts` (their reprs): what ranks compare instead of
    the values themselves."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=16).digest()
    return [_signed(int.from_bytes(h[:8], "little")), _signed(int.from_bytes(h[8:], "little"))]


def attempt(group, fn):
    """(fn(), None); under a group (None, the exception) where fn raises, for the ranks to agree
    on it (Group.exchange) before anyone raises. Without a group the exception propagates."""
    if group is None:
        return fn(), None
    try:
        return fn(), None
    except Exception as e:  # every rank raises it, as RankError, after the exchange
        return None, e


class Group:
    """A process group of tensor-parallel ranks, with the few collectives a store needs. NCCL
    groups exchange on `device` (a CUDA device), other backends (gloo) on the CPU."""

    def __init__(self, pg, device):
        self.pg = pg
        self.size = dist.get_world_size(pg)
        self.rank = dist.get_rank(pg)
        self.device = device if dist.get_backend(pg) == "nccl" else torch.device("cpu")

    def gather(self, values):
        """Every rank's list of ints (int64 range; unsigned 64-bit ones are taken mod 2^64), as
        a list over the ranks."""
        t = torch.tensor([_signed(int(v)) for v in values], dtype=torch.int64, device=self.device)
        outs = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(outs, t, group=self.pg)
        return [o.tolist() for o in outs]

    def exchange(self, where, error, items=()):
        """The one collective of a store call: every rank passes the exception its own step
        raised (or None) and `items`, a list of (what, width, values): `width` ints each rank
        must have equal (values None where the step failed). When any rank failed, every rank
        raises RankError naming the failed ranks and their messages (a failed rank chains its
        own exception); when the ranks' values of an item differ, every rank raises RankError
        naming the ranks that differ from rank 0."""
        flat = [0 if error is None else 1]
        for _, width, values in items:
            flat += [0] * width if values is None else list(values)
        rows = self.gather(flat)
        bad = [r for r, row in enumerate(rows) if row[0]]
        if bad:
            texts = [None] * self.size
            dist.all_gather_object(texts, None if error is None else
                                   "%s: %s" % (type(error).__name__, error), group=self.pg)
            msgs = [texts[r] for r in bad]
            text = "; ".join("rank %d: %s" % (r, m) for r, m in zip(bad, msgs))
            raise RankError("%s failed on %d of %d ranks (%s); every rank raises"
                            % (where, len(bad), self.size, text), ranks=bad,
                            messages=msgs) from error
        at = 1
        for what, width, _ in items:
            odd = [r for r, row in enumerate(rows) if row[at:at + width] != rows[0][at:at + width]]
            at += width
            if odd:
                raise RankError("%s: rank%s %s gave a different %s than rank 0, expected the same "
                                "on every rank of the tensor-parallel group (call the store with "
                                "the same arguments, in the same order, on every rank)"
                                % (where, "s" if len(odd) > 1 else "", ", ".join(map(str, odd)),
                                   what), ranks=odd)

    def agree(self, where, error):
        """exchange() without values: raises on every rank when any rank's step failed."""
        self.exchange(where, error)


def tensor_parallel(model, group):
    """(ProcessGroup or None, size, rank) of the model's tensor parallelism: `group` "auto"
    takes the one transformers set up (a model loaded with tp_plan), None none, a ProcessGroup
    that one."""
    if group is None:
        return None, 1, 0
    if isinstance(group, str) and group == "auto":
        # transformers (DistributedMixin.maybe_distribute_model) sets _tp_size and _device_mesh
        # on a model loaded with a tensor-parallel plan; its mesh has a "tp" dimension when it
        # has several.
        size = getattr(model, "_tp_size", None)
        mesh = getattr(model, "_device_mesh", None)
        if not size or size == 1 or mesh is None:
            return None, 1, 0
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("lazyattn.hf.DocumentStore: the model is tensor-parallel (tp_size "
                               "%s) but torch.distributed is not initialized" % size)
        if getattr(mesh, "ndim", 1) > 1:
            mesh = mesh["tp"]
        pg = mesh.get_group()
    else:
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError("lazyattn.hf.DocumentStore: group %r, expected \"auto\", None or a "
                            "torch.distributed ProcessGroup" % (group,))
        pg = group
    return pg, dist.get_world_size(pg), dist.get_rank(pg)
