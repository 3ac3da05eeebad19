"""ctypes bindings of liblazyattn_c.so (capi/lazyattn_c.h): loading, prototypes, status checks.

The library is found at $LAZYATTN_LIB (a file, or a directory holding liblazyattn_c.so), else next
to this package (where `pip install ./python` puts it), else in the build directories of the
repository (build/*/capi/). Nothing here imports torch: the pool's bookkeeping works without it.
"""
import ctypes
import glob
import os

ABI_VERSION = 6

OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_CUDA = 2
ERROR_OUT_OF_MEMORY = 3
ERROR_INTERNAL = 4

DTYPE_FLOAT16 = 1
DTYPE_BFLOAT16 = 2
DTYPE_FLOAT8_E4M3 = 3
FORM_RAW = 0
FORM_LOCAL = 1
FORM_ABSOLUTE = 2
FORMS = {"raw": FORM_RAW, "local": FORM_LOCAL, "absolute": FORM_ABSOLUTE}
SEGMENT_DOCUMENT = 0
SEGMENT_TAIL = 1
PLAN_DECODE = 0
PLAN_PREFILL = 1
APPLY_ROPE = 1
QUERY_ROTATED = 2
INPUTS_SCALED = 4
WRITE_ROTATE = 1
EVICTION_LRU = 0
EVICTION_SEGMENTED_LRU = 1
EVICTIONS = {"lru": EVICTION_LRU, "segmented_lru": EVICTION_SEGMENTED_LRU}

_LIB_NAME = "liblazyattn_c.so"


class LazyAttnError(RuntimeError):
    """A failed lazyattn call: `code` is the C status, the message is lazyattn_last_error()."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class LazyAttnValueError(LazyAttnError, ValueError):
    """A bad value (LAZYATTN_ERROR_INVALID_ARGUMENT); also a ValueError."""


class Segment(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("pad_", ctypes.c_int32), ("handle", ctypes.c_uint64),
                ("length", ctypes.c_int64), ("start", ctypes.c_int64)]


class PoolStats(ctypes.Structure):
    _fields_ = [("num_pages", ctypes.c_int64), ("pages_in_use", ctypes.c_int64),
                ("documents", ctypes.c_int64), ("pinned_documents", ctypes.c_int64),
                ("tails", ctypes.c_int64), ("evictions", ctypes.c_int64),
                ("dedupes", ctypes.c_int64), ("hits", ctypes.c_int64),
                ("misses", ctypes.c_int64), ("inserts", ctypes.c_int64)]


class PlanOptions(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("num_qo_heads", ctypes.c_int32),
                ("forced_splits", ctypes.c_int32), ("kv_splits", ctypes.c_int32),
                ("headroom_tokens", ctypes.c_int64), ("like", ctypes.c_void_p)]


class PlanInfo(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_int64), ("workspace_bytes", ctypes.c_int64),
                ("num_requests", ctypes.c_int32), ("num_queries", ctypes.c_int32),
                ("num_keys", ctypes.c_int64), ("num_work", ctypes.c_int32),
                ("kv_splits", ctypes.c_int32)]


def _candidates():
    env = os.environ.get("LAZYATTN_LIB")
    if env:
        # An explicit choice is the only one tried: a wrong path should fail, not fall back.
        return [os.path.join(env, _LIB_NAME) if os.path.isdir(env) else env]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    found = [os.path.join(here, _LIB_NAME)]
    found += sorted(glob.glob(os.path.join(repo, "build", "*", "capi", _LIB_NAME)),
                    key=os.path.getmtime, reverse=True)
    return found


_lib = None


def lib():
    """The loaded library with its prototypes set (loaded once)."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            handle = ctypes.CDLL(path)
            break
        tried.append(path)
    else:
        raise OSError("lazyattn: cannot find %s (tried %s); install the package "
                      "(pip install --no-build-isolation ./python) or build the CMake target "
                      "lazyattn_c and set LAZYATTN_LIB to the file or its directory"
                      % (_LIB_NAME, ", ".join(tried) or "nothing"))
    version = handle.lazyattn_abi_version()
    if version != ABI_VERSION:
        raise OSError("lazyattn: %s has C ABI version %d, expected %d" % (path, version,
                                                                         ABI_VERSION))
    _declare(handle)
    handle.path = path
    _lib = handle
    return _lib


def _declare(h):
    c = ctypes
    i32, i64, u64, vp, dbl = c.c_int32, c.c_int64, c.c_uint64, c.c_void_p, c.c_double
    pi32, pi64, pu64, pvp = c.POINTER(i32), c.POINTER(i64), c.POINTER(u64), c.POINTER(vp)
    pdbl, pf32 = c.POINTER(dbl), c.POINTER(c.c_float)
    launch = [vp, i32, vp, vp, vp, vp, i32, dbl, i32, vp, vp, vp, vp]
    # Device pointers are void* here, as in `launch`: (plan, layer, k_pool, v_pool, scales,
    # plan_device, workspace, num_qo_heads, softmax_scale, flags, q_dtype, q, o, maybe_lse, stream).
    launch_fp8 = [vp, i32, vp, vp, vp, vp, vp, i32, dbl, i32, i32, vp, vp, vp, vp]
    protos = {
        "lazyattn_abi_version": (c.c_int, []),
        "lazyattn_pool_create": (c.c_int, [i32, i32, i32, i32, i32, i64, i32, pvp]),
        "lazyattn_pool_create_with_eviction": (c.c_int, [i32, i32, i32, i32, i32, i64, i32, i32,
                                                         pvp]),
        "lazyattn_pool_fingerprint": (c.c_int, [vp, pu64]),
        "lazyattn_pool_create_fp8": (c.c_int, [i32, i32, i32, i32, i64, i32, i32, pf32, pf32,
                                               pvp]),
        "lazyattn_pool_scales": (c.c_int, [vp, pf32, i64]),
        "lazyattn_pool_eviction": (c.c_int, [vp, pi32]),
        "lazyattn_pool_destroy": (c.c_int, [vp]),
        "lazyattn_pool_stats_get": (c.c_int, [vp, c.POINTER(PoolStats)]),
        "lazyattn_pool_bytes": (c.c_int, [vp, pi64]),
        "lazyattn_rope_create_json": (c.c_int, [c.c_char_p, i32, pvp]),
        "lazyattn_rope_destroy": (c.c_int, [vp]),
        "lazyattn_rope_info": (c.c_int, [vp, pi32, pi32, pi32, pi32]),
        "lazyattn_rope_frequencies": (c.c_int, [vp, i64, pdbl, pdbl]),
        "lazyattn_doc_allocate": (c.c_int, [vp, u64, u64, i32, i64, pu64, pi32]),
        "lazyattn_doc_find": (c.c_int, [vp, u64, u64, i32, i32, pu64, pi32]),
        "lazyattn_doc_commit": (c.c_int, [vp, u64]),
        "lazyattn_doc_pin": (c.c_int, [vp, u64]),
        "lazyattn_doc_unpin": (c.c_int, [vp, u64]),
        "lazyattn_doc_erase": (c.c_int, [vp, u64]),
        "lazyattn_doc_info": (c.c_int, [vp, u64, pi64, pi32, pi32, pi32]),
        "lazyattn_doc_key_from_tokens": (c.c_int, [pi32, i64, pu64, pu64]),
        "lazyattn_tail_create": (c.c_int, [vp, i32, pu64]),
        "lazyattn_tail_reserve": (c.c_int, [vp, u64, i64, pi64]),
        "lazyattn_tail_release": (c.c_int, [vp, u64]),
        "lazyattn_tail_info": (c.c_int, [vp, u64, pi64, pi32]),
        "lazyattn_destinations_bytes": (c.c_int, [i64, i32, pi64]),
        "lazyattn_destinations": (c.c_int, [vp, i32, pi32, pu64, pi64, pi64, i32, vp, i64, pi64]),
        "lazyattn_write": (c.c_int, [vp, vp, i32, vp, vp, vp, vp, i64, vp, i32, vp]),
        "lazyattn_write_fp8": (c.c_int, [vp, vp, i32, vp, vp, vp, vp, i32, vp, vp, i64, vp, i32,
                                         vp]),
        "lazyattn_plan_create": (c.c_int, [vp, vp, c.POINTER(Segment), pi32, pi32, i32,
                                           c.POINTER(PlanOptions), pvp]),
        "lazyattn_plan_destroy": (c.c_int, [vp]),
        "lazyattn_plan_info": (c.c_int, [vp, c.POINTER(PlanInfo)]),
        "lazyattn_plan_pack": (c.c_int, [vp, vp, i64]),
        "lazyattn_plan_valid": (c.c_int, [vp, pi32]),
        "lazyattn_prefill": (c.c_int, launch),
        "lazyattn_decode": (c.c_int, launch),
        "lazyattn_prefill_fp8": (c.c_int, launch_fp8),
        "lazyattn_decode_fp8": (c.c_int, launch_fp8),
    }
    for name, (res, args) in protos.items():
        fn = getattr(h, name)
        fn.restype = res
        fn.argtypes = args
    h.lazyattn_last_error.restype = c.c_char_p
    h.lazyattn_last_error.argtypes = []


def call(name, *args):
    """Calls lazyattn_<name>(*args); raises LazyAttnError (LazyAttnValueError for bad values)
    with the library's message when the status is not OK."""
    h = lib()
    status = getattr(h, "lazyattn_" + name)(*args)
    if status != OK:
        message = h.lazyattn_last_error().decode("utf-8", "replace")
        cls = LazyAttnValueError if status == ERROR_INVALID_ARGUMENT else LazyAttnError
        raise cls(status, message)
