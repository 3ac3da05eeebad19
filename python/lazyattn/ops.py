"""lazyattn's kernels as PyTorch operators (torch.library): lazyattn::write, lazyattn::prefill and
lazyattn::decode over 16-bit pools, lazyattn::write_fp8, lazyattn::prefill_fp8 and
lazyattn::decode_fp8 over fp8 (e4m3) pools, with fake (meta) implementations, so
torch.compile(fullgraph=True) traces code that calls them and CUDA graphs capture them.

Each takes the device buffers as tensors: the pool's K/V [num_layers, num_pages, num_kv_heads,
page_size, head_dim], a plan's packed image (uint8) and split-KV workspace (uint8, mutated), and
the library's host handles as a CPU int64 tensor (`meta`), so that a new plan is new data, not a
new constant to recompile for. The fp8 operators take the pool's scales too (float32 [2,
num_layers, num_kv_heads]: K's, then V's) and the write its saturation counter (int64 [1],
mutated); their tokens, queries and outputs are bfloat16 or float16, chosen per call. The
implementations call liblazyattn_c through ctypes on torch's current CUDA stream; nothing here
synchronises the host. lazyattn.Pool's methods check their arguments and call these. Called
directly, each operator checks what the library cannot see behind its raw pointers (devices,
dtypes, layouts, and that every buffer is as large as the pool and plan its handles name) and
raises ValueError naming the tensor before anything runs.

`call(name, ...)` is how lazyattn.Pool runs them: the operator where torch traces (torch.compile,
export, fake or functional tensors), its implementation directly otherwise (the same checks and
launch). In eager mode the dispatch of these mutating custom operators is host time the decode
step waits on: under transformers (Llama-3.1-8B shapes, 32 layers, two calls per layer and
step, torch 2.11, H200) a decode step took 43.0 ms through the operators, 22.8 ms calling the
implementations.
"""
import ctypes

import torch

from . import _capi


def _stream(t):
    return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)


def _ptr(t):
    return ctypes.c_void_p(t.data_ptr())


def _check(where, name, t, device, dtype=None, numel=None, dim=None):
    """t is a contiguous tensor on `device` (of `dtype`, >= `numel` elements, `dim`-D)."""
    if t.device != device:
        raise ValueError("%s: %s on %s, expected %s" % (where, name, t.device, device))
    if dtype is not None and t.dtype != dtype:
        raise ValueError("%s: %s of dtype %s, expected %s" % (where, name, t.dtype, dtype))
    if not t.is_contiguous():
        raise ValueError("%s: %s is not contiguous (strides %s), expected a contiguous tensor"
                         % (where, name, tuple(t.stride())))
    if dim is not None and t.dim() != dim:
        raise ValueError("%s: %s of shape %s, expected %d dimensions"
                         % (where, name, tuple(t.shape), dim))
    if numel is not None and t.numel() < numel:
        raise ValueError("%s: %s of %d elements, expected at least %d"
                         % (where, name, t.numel(), numel))


# The 16-bit types fp8 pools take tokens and queries in, and their C values.
_IO_DTYPES = {torch.float16: _capi.DTYPE_FLOAT16, torch.bfloat16: _capi.DTYPE_BFLOAT16}
FP8 = torch.float8_e4m3fn


def _check_pools(where, k_pool, v_pool, pool_handle, layer, fp8=False):
    """k_pool and v_pool: the pool's [num_layers, num_pages, kv_heads, page_size, head_dim]
    tensors on one CUDA device, 16-bit (torch.float8_e4m3fn for the fp8 operators), as large as
    the pool `pool_handle` (when given)."""
    if k_pool.device.type != "cuda":
        raise ValueError("%s: k_pool on %s, expected a CUDA device" % (where, k_pool.device))
    _check(where, "k_pool", k_pool, k_pool.device, dim=5)
    if fp8 and k_pool.dtype != FP8:
        raise ValueError("%s: k_pool of dtype %s, expected torch.float8_e4m3fn (16-bit pools: "
                         "lazyattn::%s)" % (where, k_pool.dtype, where.split("::")[-1][:-4]))
    if not fp8 and k_pool.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError("%s: k_pool of dtype %s, expected torch.bfloat16 or torch.float16%s"
                         % (where, k_pool.dtype, " (fp8 pools: %s_fp8)" % where
                            if k_pool.dtype == FP8 else ""))
    _check(where, "v_pool", v_pool, k_pool.device, k_pool.dtype, dim=5)
    if tuple(v_pool.shape) != tuple(k_pool.shape):
        raise ValueError("%s: v_pool of shape %s, expected k_pool's %s"
                         % (where, tuple(v_pool.shape), tuple(k_pool.shape)))
    if pool_handle:
        nbytes = ctypes.c_int64()
        _capi.call("pool_bytes", ctypes.c_void_p(pool_handle), ctypes.byref(nbytes))
        have = k_pool.numel() * k_pool.element_size()
        if have != nbytes.value:
            raise ValueError("%s: k_pool of %d bytes, expected the pool's %d" % (where, have,
                                                                                  nbytes.value))
    if not 0 <= layer < k_pool.shape[0]:
        raise ValueError("%s: layer %d, expected in [0, %d)" % (where, layer, k_pool.shape[0]))


def _check_scales(where, scales, k_pool):
    """scales: an fp8 pool's device scales, float32 [2, num_layers, num_kv_heads] (K's, then
    V's), beside k_pool. The library cannot see their size behind the pointer."""
    _check(where, "scales", scales, k_pool.device, torch.float32)
    want = 2 * k_pool.shape[0] * k_pool.shape[2]
    if scales.numel() != want:
        raise ValueError("%s: scales of %d elements, expected 2 x num_layers %d x num_kv_heads %d "
                         "= %d" % (where, scales.numel(), k_pool.shape[0], k_pool.shape[2], want))


def _check_io(where, name, t):
    """t: bfloat16 or float16 (an fp8 pool's tokens, queries)."""
    if t.dtype not in _IO_DTYPES:
        raise ValueError("%s: %s of dtype %s, expected torch.bfloat16 or torch.float16"
                         % (where, name, t.dtype))


def _check_rows(where, k_pool, k, v, dst, flags):
    """k, v [n, kv_heads, head_dim] of one dtype, and dst as large as n tokens' destinations."""
    dev = k_pool.device
    _check(where, "v", v, dev, k.dtype, dim=3)
    row = tuple(k_pool.shape[2:3]) + tuple(k_pool.shape[4:])
    if tuple(k.shape[1:]) != row or tuple(v.shape) != tuple(k.shape):
        raise ValueError("%s: k of shape %s, v %s, expected [n, kv_heads %d, head_dim %d] both"
                         % (where, tuple(k.shape), tuple(v.shape), row[0], row[1]))
    need = ctypes.c_int64()
    _capi.call("destinations_bytes", k.shape[0], flags, ctypes.byref(need))
    _check(where, "dst", dst, dev, torch.uint8, need.value)


def _write(k_pool, v_pool, k, v, dst, meta, layer, flags):
    where = "lazyattn::write"
    pool, rope = (int(x) for x in meta.tolist())
    _check_pools(where, k_pool, v_pool, pool, layer)
    _check(where, "k", k, k_pool.device, k_pool.dtype, dim=3)
    _check_rows(where, k_pool, k, v, dst, flags)
    _capi.call("write", ctypes.c_void_p(pool), ctypes.c_void_p(rope or None), layer,
               _ptr(k_pool), _ptr(v_pool), _ptr(k), _ptr(v), k.shape[0], _ptr(dst), flags,
               _stream(k))


def _write_fp8(k_pool, v_pool, scales, saturated, k, v, dst, meta, layer, flags):
    where = "lazyattn::write_fp8"
    pool, rope = (int(x) for x in meta.tolist())
    _check_pools(where, k_pool, v_pool, pool, layer, fp8=True)
    _check_scales(where, scales, k_pool)
    # The library's counter is a uint64; torch's int64 has its bytes (and counts to 2^63).
    _check(where, "saturated", saturated, k_pool.device, torch.int64, 1)
    _check(where, "k", k, k_pool.device, dim=3)
    _check_io(where, "k", k)
    _check_rows(where, k_pool, k, v, dst, flags)
    _capi.call("write_fp8", ctypes.c_void_p(pool), ctypes.c_void_p(rope or None), layer,
               _ptr(k_pool), _ptr(v_pool), _ptr(scales), _ptr(saturated), _IO_DTYPES[k.dtype],
               _ptr(k), _ptr(v), k.shape[0], _ptr(dst), flags, _stream(k))


@torch.library.custom_op("lazyattn::write", mutates_args=("k_pool", "v_pool"))
def write(k_pool: torch.Tensor, v_pool: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          dst: torch.Tensor, meta: torch.Tensor, layer: int, flags: int) -> None:
    """Writes k, v [n, kv_heads, head_dim] of one layer at the destinations `dst` (a device copy
    of lazyattn_destinations' output); meta = [pool handle, rope handle or 0] (CPU int64)."""
    _write(k_pool, v_pool, k, v, dst, meta, layer, flags)


@write.register_fake
def _(k_pool, v_pool, k, v, dst, meta, layer, flags):
    return None


@torch.library.custom_op("lazyattn::write_fp8", mutates_args=("k_pool", "v_pool", "saturated"))
def write_fp8(k_pool: torch.Tensor, v_pool: torch.Tensor, scales: torch.Tensor,
              saturated: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dst: torch.Tensor,
              meta: torch.Tensor, layer: int, flags: int) -> None:
    """Writes bfloat16 or float16 k, v [n, kv_heads, head_dim] of one layer into an fp8 pool as
    e4m3(x / scale) (K after its rotation with flags 1); scales float32 [2, num_layers,
    num_kv_heads]; saturated (int64 [1]) counts the values whose |x / scale| reached 464
    (stored as +-448)."""
    _write_fp8(k_pool, v_pool, scales, saturated, k, v, dst, meta, layer, flags)


@write_fp8.register_fake
def _(k_pool, v_pool, scales, saturated, k, v, dst, meta, layer, flags):
    return None


def _launch(name, q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags,
            scales=None):
    """Operator `name`'s checks and launch; `scales` (fp8 pools' operators, name *_fp8) or
    None."""
    where = "lazyattn::" + name
    fp8 = scales is not None
    handles = [int(x) for x in meta.tolist()]
    info = _capi.PlanInfo()
    _capi.call("plan_info", ctypes.c_void_p(handles[0]), ctypes.byref(info))
    _check_pools(where, k_pool, v_pool, handles[1] if len(handles) > 1 else 0, layer, fp8)
    dev = k_pool.device
    if fp8:
        _check_scales(where, scales, k_pool)
        _check(where, "q", q, dev, dim=3)
        _check_io(where, "q", q)
    else:
        _check(where, "q", q, dev, k_pool.dtype, dim=3)
    if q.shape[0] != info.num_queries or q.shape[2] != k_pool.shape[4]:
        raise ValueError("%s: q of shape %s, expected [%d (the plan's queries), heads, %d]"
                         % (where, tuple(q.shape), info.num_queries, k_pool.shape[4]))
    _check(where, "plan_data", plan_data, dev, torch.uint8, info.bytes)
    _check(where, "workspace", workspace, dev, torch.uint8, info.workspace_bytes)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=q.device)
    plan, lse_ptr = ctypes.c_void_p(handles[0]), ctypes.c_void_p(lse.data_ptr())
    if fp8:
        _capi.call(name, plan, layer, _ptr(k_pool), _ptr(v_pool), _ptr(scales), _ptr(plan_data),
                   _ptr(workspace), q.shape[1], scale, flags, _IO_DTYPES[q.dtype], _ptr(q),
                   _ptr(o), lse_ptr, _stream(q))
    else:
        _capi.call(name, plan, layer, _ptr(k_pool), _ptr(v_pool), _ptr(plan_data),
                   _ptr(workspace), q.shape[1], scale, flags, _ptr(q), _ptr(o), lse_ptr,
                   _stream(q))
    return o, lse


def _launch_fp8(name, q, k_pool, v_pool, scales, plan_data, workspace, meta, layer, scale,
                flags):
    return _launch(name, q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags,
                   scales)


def _fake(q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags):
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("lazyattn::prefill", mutates_args=("workspace",))
def prefill(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, plan_data: torch.Tensor,
            workspace: torch.Tensor, meta: torch.Tensor, layer: int, scale: float,
            flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill of a plan's queries q [num_queries, num_qo_heads, head_dim] in one layer:
    (o like q, lse [num_queries, num_qo_heads] float32). meta = [plan handle, pool handle] (CPU
    int64; the pool's size checks k_pool and v_pool)."""
    return _launch("prefill", q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags)


@torch.library.custom_op("lazyattn::decode", mutates_args=("workspace",))
def decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, plan_data: torch.Tensor,
           workspace: torch.Tensor, meta: torch.Tensor, layer: int, scale: float,
           flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of a plan's requests, q [num_requests, num_qo_heads, head_dim]."""
    return _launch("decode", q, k_pool, v_pool, plan_data, workspace, meta, layer, scale, flags)


prefill.register_fake(_fake)
decode.register_fake(_fake)


def _fake_fp8(q, k_pool, v_pool, scales, plan_data, workspace, meta, layer, scale, flags):
    return torch.empty_like(q), q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


@torch.library.custom_op("lazyattn::prefill_fp8", mutates_args=("workspace",))
def prefill_fp8(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                scales: torch.Tensor, plan_data: torch.Tensor, workspace: torch.Tensor,
                meta: torch.Tensor, layer: int, scale: float,
                flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """lazyattn::prefill over an fp8 pool: q bfloat16 or float16 (o the same), scales the pool's
    float32 [2, num_layers, num_kv_heads]."""
    return _launch_fp8("prefill_fp8", q, k_pool, v_pool, scales, plan_data, workspace, meta,
                       layer, scale, flags)


@torch.library.custom_op("lazyattn::decode_fp8", mutates_args=("workspace",))
def decode_fp8(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, scales: torch.Tensor,
               plan_data: torch.Tensor, workspace: torch.Tensor, meta: torch.Tensor, layer: int,
               scale: float, flags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """lazyattn::decode over an fp8 pool (local-form and absolute segments), as prefill_fp8."""
    return _launch_fp8("decode_fp8", q, k_pool, v_pool, scales, plan_data, workspace, meta,
                       layer, scale, flags)


prefill_fp8.register_fake(_fake_fp8)
decode_fp8.register_fake(_fake_fp8)

_OPS = {"write": write, "prefill": prefill, "decode": decode, "write_fp8": write_fp8,
        "prefill_fp8": prefill_fp8, "decode_fp8": decode_fp8}
_IMPLS = {"write": _write, "write_fp8": _write_fp8,
          "prefill": lambda *a: _launch("prefill", *a), "decode": lambda *a: _launch("decode", *a),
          "prefill_fp8": lambda *a: _launch_fp8("prefill_fp8", *a),
          "decode_fp8": lambda *a: _launch_fp8("decode_fp8", *a)}


def call(name, *args):
    """Operator `name` (write, prefill, decode, or their _fp8 twins) on args: through
    torch.library where torch traces or a tensor is not a plain torch.Tensor, else its
    implementation (the same checks and launch, without the dispatcher's host time)."""
    if torch.compiler.is_compiling() or any(
            isinstance(a, torch.Tensor) and type(a) is not torch.Tensor for a in args):
        return _OPS[name](*args)
    return _IMPLS[name](*args)
