"""Float64 reference for the Python tests, written from the math (docs/02-math.md), not from the
kernels: every key rotated at its logical position, every query at its own, full attention over
the documents and causal attention over the tail, and the same-precision peer (SDPA on the same
keys and queries pre-rotated and rounded to 16 bits once). Shared by the GPU tests (scenes.py,
test_kernels.py, test_operators.py) and test_hf.py.
"""
import torch
import torch.nn.functional as F


def rotate64(x, pos, inv, attention_factor=1.0, interleaved=False):
    """R(pos) x in float64 for x [n, heads, head_dim] at integer positions pos [n]; the
    attention factor scales the rotary dims (transformers scales cos and sin by it)."""
    x = x.double()
    half = inv.numel()
    rd = 2 * half
    ang = pos.to(torch.float64).to(x.device)[:, None] * inv.to(x.device)[None, :]
    c, s = ang.cos()[:, None, :], ang.sin()[:, None, :]
    out = x.clone()
    if interleaved:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2] = attention_factor * (a * c - b * s)
        out[..., 1:rd:2] = attention_factor * (a * s + b * c)
    else:
        a, b = x[..., :half], x[..., half:rd]
        out[..., :half] = attention_factor * (a * c - b * s)
        out[..., half:rd] = attention_factor * (b * c + a * s)
    return out


def attention64(q, k, v, visible, scale):
    """q [nq, Hq, D], k/v [L, Hkv, D] float64, visible [nq, L] bool -> o [nq, Hq, D], lse."""
    g = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    logits = torch.einsum("qhd,lhd->qhl", q, kk) * scale
    logits = logits.masked_fill(~visible[:, None, :], float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.exp(logits - lse[..., None])
    return torch.einsum("qhl,lhd->qhd", p, vv), lse


def sdpa16(q, k, v, visible, scale):
    """The same attention with torch SDPA on 16-bit inputs (already rotated and rounded)."""
    g = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(g, dim=1).transpose(0, 1)[None]
    vv = v.repeat_interleave(g, dim=1).transpose(0, 1)[None]
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk, vv,
                                       attn_mask=visible[None, None], scale=scale)
    return o[0].transpose(0, 1)


def lse32(q, k, visible, scale):
    """float32 log-sum-exp over the same 16-bit inputs: the lse's same-precision peer."""
    g = q.shape[1] // k.shape[1]
    kk = k.float().repeat_interleave(g, dim=1)
    logits = torch.einsum("qhd,lhd->qhl", q.float(), kk) * scale
    return torch.logsumexp(logits.masked_fill(~visible[:, None, :], float("-inf")), dim=-1)


def check_close(name, got, ref, peer, atol, failures):
    """Per element |got - ref| <= 2 max|peer - ref| + atol; NaN fails; the first mismatches are
    reported. Returns the report line."""
    err = (got.double() - ref).abs()
    peer_err = float((peer.double() - ref).abs().max()) if peer is not None else 0.0
    bound = 2 * peer_err + atol
    bad = ~(err <= bound)
    n_bad = int(bad.sum())
    line = "%s: max err %.3g, bound %.3g (2 x peer %.3g + %.3g)" % (
        name, float(err.max()) if err.numel() else 0.0, bound, peer_err, atol)
    if n_bad:
        idx = bad.flatten().nonzero()[:6, 0].tolist()
        line += "; %d of %d over, first: %s" % (n_bad, err.numel(), ", ".join(
            "[%d] ref %.6g got %.6g" % (i, ref.flatten()[i].item(), got.flatten()[i].item())
            for i in idx))
        failures.append(line)
    return line
