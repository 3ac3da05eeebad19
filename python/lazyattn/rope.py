"""Rope: a RoPE policy from a Hugging Face config, with its frequency tables on the GPU."""
import ctypes
import json
import os

import torch

from . import _capi
from ._owned import _Owned, _device_index

class Rope(_Owned):
    """A RoPE policy from a Hugging Face config: a dict (config.json's contents, or a
    transformers config's to_dict()), a transformers config, a JSON string, or a path to a
    config.json. Its frequency tables live on `device` (default: the current CUDA device)."""

    _DESTROY = "rope_destroy"

    def __init__(self, config, device=None):
        if hasattr(config, "to_dict"):
            config = config.to_dict()
        if isinstance(config, dict):
            text = json.dumps(config, default=str)
        elif isinstance(config, (str, bytes)):
            text = config.decode() if isinstance(config, bytes) else config
            if not text.lstrip().startswith("{") and os.path.isfile(text):
                with open(text) as f:
                    text = f.read()
        else:
            raise TypeError("lazyattn.Rope: config of type %s, expected a dict, a transformers "
                            "config, a JSON string or a path" % type(config).__name__)
        self.device = _device_index(device)
        self._h = None
        h = ctypes.c_void_p()
        _capi.call("rope_create_json", text.encode(), self.device, ctypes.byref(h))
        self._h, self._open = h, True
        hd, rd, dep, il = (ctypes.c_int32() for _ in range(4))
        _capi.call("rope_info", self._h, ctypes.byref(hd), ctypes.byref(rd), ctypes.byref(dep),
                   ctypes.byref(il))
        self.head_dim, self.rotary_dim = hd.value, rd.value
        self.depends_on_length = bool(dep.value)
        self.interleaved = bool(il.value)

    def frequencies(self, rope_length=0):
        """(inv_freq [rotary_dim / 2] float64 radians per position, attention_factor): what the
        kernels use for a request whose largest position is rope_length - 1."""
        out = (ctypes.c_double * (self.rotary_dim // 2))()
        af = ctypes.c_double()
        _capi.call("rope_frequencies", self._live("lazyattn.Rope.frequencies"), int(rope_length),
                   out, ctypes.byref(af))
        return torch.tensor(list(out), dtype=torch.float64), af.value

    def __repr__(self):
        return "lazyattn.Rope(head_dim=%d, rotary_dim=%d%s%s)" % (
            self.head_dim, self.rotary_dim, ", interleaved" if self.interleaved else "",
            ", length-dependent" if self.depends_on_length else "")
