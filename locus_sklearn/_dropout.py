"""Dropout whose masks are drawn in bulk on CPU.

On CPU, torch draws a dropout mask element by element from its Mersenne
Twister (about 12 ns per element on a 2-core test machine): in LOCUS training,
with dropout on the attention weights, both residuals and the FFN, that was a
fifth of every step. Here the mask comes from numpy's PCG64 in bulk (its
random bits in under 1 ns per element, four per raw 64-bit output), seeded by
one draw from torch's generator, so that ``torch.manual_seed`` still fixes
training. Other devices use :func:`torch.nn.functional.dropout`, whose GPU
sampler is fast.
"""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Dropout", "dropout"]

# A mask element is kept when a uniform 16-bit integer is at least
# round(p * 2**16): the drop probability is p to within 2**-17.
_LEVELS = 2**16


def dropout(x, p, training=True):
    """Zero each element of ``x`` with probability p, scale the rest by 1 / (1 − p).

    The same law as :func:`torch.nn.functional.dropout`, with p rounded to a
    multiple of 2⁻¹⁶ on CPU (the kept elements are scaled by the exact inverse
    of the rounded keep probability, so the expectation is ``x``).

    Parameters
    ----------
    x : Tensor of any shape
    p : float in [0, 1]
    training : bool, default=True
        False returns ``x`` unchanged.

    Returns
    -------
    Tensor of the shape of ``x``

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> y = dropout(torch.ones(10_000), 0.25)
    >>> sorted(set(y.tolist()))  # dropped, or scaled by 1 / 0.75
    [0.0, 1.3333333730697632]
    >>> abs(float((y == 0).float().mean()) - 0.25) < 0.02  # binomial sd 0.004
    True
    """
    cut = round(p * _LEVELS)
    if not training or p == 0:
        return x
    if x.device.type != "cpu" or cut in (0, _LEVELS):
        return F.dropout(x, p, training=True)
    seed = int(torch.randint(2**62, (), dtype=torch.int64))
    n = x.numel()
    # Each raw 64-bit PCG64 output read as four 16-bit integers: the very
    # integers Generator.integers(0, 2**16, dtype=uint16) takes from it (the
    # same masks on a little-endian machine), in about half its time.
    bits = np.random.PCG64(seed).random_raw(-(-n // 4)).view(np.uint16)[:n]
    # The kept elements' scale goes into the mask as numpy builds it (one
    # pass, where a bool mask, its conversion and a scaling took three).
    dtype = np.float64 if x.dtype == torch.float64 else np.float32
    mask = np.multiply(bits >= cut, dtype(_LEVELS / (_LEVELS - cut)), dtype=dtype)
    return x * torch.from_numpy(mask).view(x.shape).to(x.dtype)


class Dropout(nn.Module):
    """:class:`torch.nn.Dropout` with :func:`dropout`'s bulk CPU masks.

    Parameters
    ----------
    p : float, default=0.5

    Examples
    --------
    >>> import torch
    >>> layer = Dropout(0.5).eval()
    >>> layer(torch.ones(3))
    tensor([1., 1., 1.])
    """

    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, x):
        """Shape of ``x`` is kept."""
        return dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
