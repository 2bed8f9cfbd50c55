"""argparse value types shared by the ``locus`` subcommands (here and in
:mod:`locus_sklearn.serve`): each turns one option's text into a checked value
or an :class:`argparse.ArgumentTypeError` that says what was expected."""

import argparse

__all__ = ["model_list", "nonnegative_float", "positive_float", "positive_int"]


def positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
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
