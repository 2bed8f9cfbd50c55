"""Torch tensors given where NumPy arrays are expected.

NumPy has no bfloat16 (the dtype of a model run in bf16) and cannot read a
tensor that requires grad or lives on a GPU: ``np.asarray``, pandas and
scikit-learn's ``check_array`` failed on those with torch's own message. Every
reader of user arrays (evaluations, costs, encodings, embeddings) passes them
through :func:`untorched` first.
"""

import sys

__all__ = ["untorched"]


def untorched(value):
    """``value`` as NumPy reads it: a torch tensor detached, on the CPU and,
    if floating, as float64 (which holds every torch float exactly), as an
    ndarray; anything else as it came.

    torch is not imported for this: if nothing imported it, no value is a
    tensor (``import locus_sklearn`` does not import torch).

    Examples
    --------
    >>> import torch
    >>> untorched(torch.tensor([0.5, 1.0], dtype=torch.bfloat16, requires_grad=True))
    array([0.5, 1. ])
    >>> untorched([1, 2])
    [1, 2]
    """
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    if value.is_floating_point():
        value = value.to(torch.float64)
    return value.numpy()
