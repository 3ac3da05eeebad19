"""Documents and tails (handles into a pool) and the layouts that place them in a request."""
import ctypes

from . import _capi
from ._capi import LazyAttnError

class Document:
    """A stored document: `length` tokens in `form` ('raw' or 'local'), named by a handle that
    goes stale when the document is evicted or erased."""

    kind = _capi.SEGMENT_DOCUMENT

    def __init__(self, pool, handle, length, form, key):
        self.pool, self.handle, self.length, self.form, self.key = pool, handle, length, form, key

    def pin(self):
        _capi.call("doc_pin", self.pool._live("lazyattn.Document.pin"), self.handle)

    def unpin(self):
        _capi.call("doc_unpin", self.pool._live("lazyattn.Document.unpin"), self.handle)

    def erase(self):
        _capi.call("doc_erase", self.pool._live("lazyattn.Document.erase"), self.handle)

    def info(self):
        """{'length', 'form', 'committed', 'pins'}; raises when the handle is stale."""
        n, f, c, p = ctypes.c_int64(), ctypes.c_int32(), ctypes.c_int32(), ctypes.c_int32()
        _capi.call("doc_info", self.pool._live("lazyattn.Document.info"), self.handle,
                   ctypes.byref(n), ctypes.byref(f), ctypes.byref(c), ctypes.byref(p))
        forms = {v: k for k, v in _capi.FORMS.items()}
        return {"length": n.value, "form": forms[f.value], "committed": bool(c.value),
                "pins": p.value}

    @property
    def is_live(self):
        try:
            self.info()
            return True
        except LazyAttnError:
            return False

    def __repr__(self):
        return "lazyattn.Document(length=%d, form=%s)" % (self.length, self.form)


class Tail:
    """A request's private tokens (question, then generated ones), in 'raw', 'local' or
    'absolute' form (K rotated at its logical positions, as a model's forward leaves it)."""

    kind = _capi.SEGMENT_TAIL

    def __init__(self, pool, handle, form):
        self.pool, self.handle, self.form = pool, handle, form

    @property
    def length(self):
        n = ctypes.c_int64()
        _capi.call("tail_info", self.pool._live("lazyattn.Tail.length"), self.handle,
                   ctypes.byref(n), None)
        return n.value

    def release(self):
        _capi.call("tail_release", self.pool._live("lazyattn.Tail.release"), self.handle)

    def __repr__(self):
        return "lazyattn.Tail(form=%s)" % self.form


# ---- layouts -------------------------------------------------------------------------------------
# A layout is one request's segments, a list of (Document or Tail, start) or (Document, start,
# length) for a document's prefix, exactly one tail (given whole, at the end of its keys or not).

def back_to_back(docs, tail, first_start=0):
    """Block-Attention layout: documents back to back from first_start, then the tail."""
    segs, pos = [], int(first_start)
    for d in docs:
        segs.append((d, pos))
        pos += d.length
    segs.append((tail, pos))
    return segs


def parallel(docs, tail, start=0):
    """APE-style layout: every document at `start`, the tail after the longest."""
    longest = max([d.length for d in docs] or [0])
    return [(d, int(start)) for d in docs] + [(tail, int(start) + longest)]


def gapped(docs, starts, tail, tail_start):
    """Prompt Cache-style layout: document j at starts[j], the tail at tail_start."""
    if len(docs) != len(starts):
        raise ValueError("lazyattn.gapped: %d documents and %d starts, expected one start each"
                         % (len(docs), len(starts)))
    return [(d, int(s)) for d, s in zip(docs, starts)] + [(tail, int(tail_start))]


def tail_start(layout):
    """The logical position of the layout's tail token 0."""
    for item in layout:
        if isinstance(item[0], Tail):
            return int(item[1])
    raise ValueError("lazyattn.tail_start: the layout has no tail")
