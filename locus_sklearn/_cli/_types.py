"""argparse value types shared by the ``locus`` subcommands (here and in
:mod:`locus_sklearn.serve`): each turns one option's text into a checked value
or an :class:`argparse.ArgumentTypeError` that says what was expected."""

import argparse

__all__ = [
    "int_at_least",
    "model_list",
    "nonnegative_float",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "seed",
]


def int_at_least(low):
    """An argparse type: an integer >= ``low``.

    Examples
    --------
    >>> int_at_least(2)("3")
    3
    >>> int_at_least(2)("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer >= 2, got '1'
    """
    what = {0: "an integer >= 0", 1: "a positive integer"}.get(
        low, f"an integer >= {low}"
    )

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = f"int_at_least_{low}"
    return parse


positive_int = int_at_least(1)
positive_int.__name__ = "positive_int"
nonnegative_int = int_at_least(0)
nonnegative_int.__name__ = "nonnegative_int"


def seed(text):
    """An argparse type: a random seed, an integer in [0, 2**32 - 1] (what
    NumPy's RandomState takes).

    Examples
    --------
    >>> seed("7")
    7
    >>> seed("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer from 0 to 4294967295, got '-1'
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(
            f"expected an integer from 0 to {2**32 - 1}, got {text!r}"
        )
    return value


def nonnegative_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number >= 0, got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def positive_float(text):
    value = nonnegative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def model_list(text):
    models = [m.strip() for m in text.split(",") if m.strip()]
    if not models:
        raise argparse.ArgumentTypeError("expected comma-separated model names")
    return models
