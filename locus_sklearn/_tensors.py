"""Torch tensors given where NumPy arrays are expected.

NumPy has no bfloat16 (the dtype of a model run in bf16) and cannot read a
tensor that requires grad or lives on a GPU: ``np.asarray``, pandas and
scikit-learn's ``check_array`` failed on those with torch's own message. Every
reader of user arrays (evaluations, costs, encodings, embeddings, the metrics'
scores) passes them through :func:`untorched` first.

Reading an input as float64 forgets the precision it came in: a float32 0.7
is 0.69999999 in float64, and fell below a threshold of 0.7 written in the
same precision. :func:`input_eps` and :func:`in_input_precision` read that
precision from the input as given, NumPy, pandas or torch alike.
"""

import sys
from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["in_input_precision", "input_eps", "untorched"]


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


def _held(values):
    """The arrays, tensors and scalars ``values`` holds: a DataFrame's
    columns, and the items of lists, tuples, mappings and object arrays or
    Series, at any depth."""
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, pd.DataFrame):
            stack.extend(value.iloc[:, i] for i in range(value.shape[1]))
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif isinstance(value, np.ndarray | pd.Series) and value.dtype == object:
            stack.extend(np.ravel(np.asarray(value, dtype=object)))
        else:
            yield value


def _float_types(values):
    """``(eps, cast)`` of each floating type narrower than float64 that
    ``values`` came in: an array, pandas Series or torch tensor, a
    DataFrame's columns, or such scalars in lists, tuples, mappings or
    object arrays (nested: a list of rows of float32 scalars counts).
    ``cast`` rounds a Python float to that type. Ints, Python floats and
    anything that is not a number yield nothing (their checks are the
    callers'); torch is not imported for this, as in :func:`untorched`."""
    torch = sys.modules.get("torch")
    for value in _held(values):
        if torch is not None and isinstance(value, torch.Tensor):
            dtype = value.dtype
            if dtype.is_floating_point and dtype != torch.float64:
                yield (
                    float(torch.finfo(dtype).eps),
                    lambda x, t=dtype: float(torch.tensor(x, dtype=t)),
                )
            continue
        dtype = getattr(value, "dtype", None)
        dtype = getattr(dtype, "numpy_dtype", dtype)  # pandas' Float32
        if (
            isinstance(dtype, np.dtype)
            and np.issubdtype(dtype, np.floating)
            and np.finfo(dtype).eps > np.finfo(np.float64).eps
        ):
            yield float(np.finfo(dtype).eps), lambda x, t=dtype.type: float(t(x))


def input_eps(values):
    """Machine epsilon of the coarsest float type narrower than float64 that
    ``values`` came in (see :func:`in_input_precision` for what counts), or
    0.0 where none did.

    Examples
    --------
    >>> import numpy as np, torch
    >>> input_eps(np.array([0.1, 0.2], dtype=np.float32)) == 2.0**-23
    True
    >>> input_eps({"a": torch.tensor(0.1, dtype=torch.bfloat16)}) == 2.0**-7
    True
    >>> input_eps([[np.float32(0.1)], [0.2]]) == 2.0**-23
    True
    >>> input_eps([0.1, 0.2]), input_eps({"a": np.float64(0.1)})
    (0.0, 0.0)
    """
    return max((eps for eps, _ in _float_types(values)), default=0.0)


def in_input_precision(number, values):
    """``number`` rounded to the coarsest float type narrower than float64
    that ``values`` came in, as a Python float; ``number`` itself where none
    did.

    An array, pandas Series (pandas' ``Float32`` included) or torch tensor
    counts, as do a DataFrame's columns and such scalars in lists, tuples,
    mappings or object arrays, at any depth; ints and Python floats do not.

    Examples
    --------
    >>> import numpy as np, torch
    >>> in_input_precision(0.7, np.array([0.7], dtype=np.float32)) == float(np.float32(0.7))
    True
    >>> in_input_precision(0.7, torch.tensor([0.7])) == float(np.float32(0.7))
    True
    >>> in_input_precision(0.7, [0.7])
    0.7
    """
    coarsest = max(_float_types(values), key=lambda t: t[0], default=None)
    return number if coarsest is None else coarsest[1](number)
