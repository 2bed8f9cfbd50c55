"""One place that turns an estimator's ``device=`` parameter into a torch device."""

from numbers import Integral

import torch

from ._params import short_int

__all__ = ["parse_device", "resolve_device"]


def parse_device(device, *, name="device"):
    """``device`` as a torch device, or a ValueError naming ``name`` when it
    is none; whether this machine has it is :func:`resolve_device`'s check.

    Examples
    --------
    >>> from locus_sklearn._device import parse_device
    >>> parse_device("cuda:1")
    device(type='cuda', index=1)
    """
    try:
        return torch.device(device)
    # ValueError: an index past int64 ("Overflow when unpacking long long").
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        # short_int: the digits of 10**30 help no one, 10**5000 has no repr.
        is_int = isinstance(device, Integral) and not isinstance(device, bool)
        shown = short_int(device) if is_int else repr(device)
        raise ValueError(
            f"{name}={shown} is not a torch device ({exc}); use 'cpu', 'cuda', "
            "'cuda:N' or None."
        ) from None


def resolve_device(device, *, name="device"):
    """The torch device for ``device``, checked before any work is done.

    Parameters
    ----------
    device : str, torch.device or None
        None picks CUDA when this torch has a usable GPU, else the CPU.
    name : str, default="device"
        Parameter name used in error messages.

    Returns
    -------
    device : str
        E.g. ``"cpu"`` or ``"cuda:0"``; any CPU device is ``"cpu"``.

    Examples
    --------
    >>> from locus_sklearn._device import resolve_device
    >>> resolve_device("cpu")
    'cpu'
    >>> resolve_device("cpu:0")
    'cpu'
    """
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    resolved = parse_device(device, name=name)
    if resolved.type == "meta":
        raise ValueError(
            f"{name}={device!r}: meta tensors hold no data, so nothing could be "
            "computed there; use 'cpu', 'cuda', 'cuda:N' or None."
        )
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{name}={device!r} needs CUDA, but this torch "
                f"({torch.__version__}) has no usable CUDA device; use device='cpu' "
                "or None, or install a CUDA build of torch."
            )
        n_gpus = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= n_gpus:
            raise ValueError(
                f"{name}={device!r}: this machine has {n_gpus} CUDA device(s), "
                f"cuda:0 to cuda:{n_gpus - 1}."
            )
    elif resolved.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(
                f"{name}={device!r} needs Apple's MPS backend, which is not "
                "available here; use device='cpu' or None."
            )
    elif resolved.type != "cpu":
        # Other backends (xpu, hpu, ...) fail deep inside torch, each its own
        # way (an AssertionError, a missing module): try one empty tensor.
        try:
            torch.empty(0, device=resolved)
        except Exception as exc:  # noqa: BLE001 - any failure means unusable
            raise ValueError(
                f"{name}={device!r} is not usable with this torch "
                f"({type(exc).__name__}: {exc}); use 'cpu', 'cuda', 'cuda:N' or "
                "None."
            ) from None
    if resolved.type == "cpu":
        # One CPU device whatever the index: tensors placed on "cpu:0" are
        # pickled tagged so, and torch cannot restore that location, so a
        # model fitted there could be pickled (joblib, n_jobs workers) but
        # never loaded back.
        return "cpu"
    return str(resolved)
