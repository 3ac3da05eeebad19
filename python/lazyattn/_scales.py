"""fp8 pools' scales: one per layer and KV head, checked in Python (shape, finite, positive, in
float32) so that a bad one is named before the library is called."""
import math

import torch


def per_head(where, name, value, num_layers, num_kv_heads):
    """`value` (None for all 1, a number, or a nested sequence or tensor [num_layers,
    num_kv_heads]) as the num_layers * num_kv_heads float32 values the library takes, layer by
    layer. Raises TypeError or ValueError naming the value and what was expected."""
    expected = ("a float or a sequence or tensor [num_layers %d, num_kv_heads %d] of floats"
                % (num_layers, num_kv_heads))
    if num_layers < 1 or num_kv_heads < 1:
        return []  # the library names the bad size
    if value is None:
        value = 1.0
    if isinstance(value, (bool, str, bytes)):
        raise TypeError("%s: %s %r, expected %s" % (where, name, value, expected))
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
    try:
        t = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError("%s: %s of type %s (%s), expected %s"
                        % (where, name, type(value).__name__, e, expected)) from None
    if t.dim() == 0:
        t = t.expand(num_layers, num_kv_heads)
    elif tuple(t.shape) != (num_layers, num_kv_heads):
        raise ValueError("%s: %s of shape %s, expected %s"
                         % (where, name, list(t.shape), expected))
    given = t.reshape(-1).tolist()
    stored = t.to(torch.float32).reshape(-1).tolist()
    for i, (x, y) in enumerate(zip(given, stored)):
        if not (math.isfinite(y) and y > 0):
            layer, head = divmod(i, num_kv_heads)
            # A float64 value fine on its own can still overflow or underflow float32.
            f32 = "" if not (math.isfinite(x) and x > 0) else " (%r in float32)" % y
            raise ValueError("%s: %s[%d, %d] (layer %d, KV head %d) is %r%s, expected a finite "
                             "positive scale" % (where, name, layer, head, layer, head, x, f32))
    return stored
