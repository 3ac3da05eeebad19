"""What the package's objects share: the handle owner (close, context manager, the open flag that
code torch.compile traces reads), device and storage-form arguments, handles as CPU tensors."""
import torch

from . import _capi
from ._capi import LazyAttnValueError

def _device_index(device):
    if device is None:
        return torch.cuda.current_device()
    d = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    if d.type != "cuda":
        raise ValueError("lazyattn: device %s, expected a CUDA device" % d)
    return d.index if d.index is not None else torch.cuda.current_device()


def _form(form):
    if form not in _capi.FORMS:
        raise ValueError("lazyattn: form %r, expected 'raw', 'local' or 'absolute'" % (form,))
    return _capi.FORMS[form]


class _Owned:
    """An object that owns a library handle `_h`, destroyed by lazyattn_<_DESTROY> on close() or
    when the object is collected."""

    _DESTROY = None
    _open = False  # a plain flag (not the ctypes handle): code torch.compile traces reads it

    def close(self):
        if getattr(self, "_h", None):
            self._open = False
            _capi.call(self._DESTROY, self._h)
            self._h = None

    @property
    def closed(self):
        return not self._open

    def _check_open(self, where):
        if not self._open:
            raise LazyAttnValueError(_capi.ERROR_INVALID_ARGUMENT,
                                     "%s: the %s was closed, expected an open one"
                                     % (where, type(self).__name__))

    def _live(self, where):
        self._check_open(where)
        return self._h

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
