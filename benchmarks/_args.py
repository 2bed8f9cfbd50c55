"""Argparse types shared by the benchmark scripts: a bad value is refused when
the command line is read, naming the option, not after minutes of work."""

import argparse


def positive_int(text):
    """An int >= 1 (``--threads``, ``--jobs``, ``--repeats``, ``--clusters``).

    >>> positive_int("4")
    4
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return value


def non_negative_int(text):
    """An int >= 0 (``--seeds``: a random_state).

    >>> non_negative_int("0")
    0
    """
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def n_or_all(text):
    """Training evaluations per model: an int >= 1 or ``"all"`` (``--n``).

    >>> n_or_all("all"), n_or_all("256")
    ('all', 256)
    """
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an integer >= 1 nor 'all'"
        )
    return value


def non_negative_float(text):
    """A float >= 0 (``--prior``).

    >>> non_negative_float("0.5")
    0.5
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def locus_setting(extra=(), fixed=("encoder", "random_state")):
    """The type of a ``--locus KEY=VALUE`` item: ``KEY`` must be a
    ``LocusEmbedder`` parameter (or one of ``extra``) that the script does not
    set itself (``fixed``); the item is returned unchanged.

    >>> check = locus_setting()
    >>> check("max_epochs=1")
    'max_epochs=1'
    >>> check("bogus=1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: 'bogus=1': 'bogus' is not a LocusEmbedder parameter ...
    """
    from locus_sklearn import LocusEmbedder

    valid = sorted((set(LocusEmbedder().get_params()) - set(fixed)) | set(extra))

    def check(text):
        key, sep, _ = text.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
        if key in fixed:
            raise argparse.ArgumentTypeError(
                f"{text!r}: the benchmark sets {key!r} itself"
            )
        if key not in valid:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {key!r} is not a LocusEmbedder parameter this "
                f"benchmark lets you set; use one of {', '.join(valid)}"
            )
        return text

    return check
