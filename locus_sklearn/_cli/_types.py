"""argparse value types shared by the ``locus`` subcommands (here and in
:mod:`locus_sklearn.serve`): each turns one option's text into a checked value
or an :class:`argparse.ArgumentTypeError` that says what was expected."""

import argparse
import csv

__all__ = [
    "fraction",
    "int_at_least",
    "model_list",
    "nonnegative_float",
    "nonnegative_int",
    "open_fraction",
    "path",
    "positive_float",
    "positive_int",
    "resolve_models",
    "seed",
    "threads",
]

#: The most torch threads ``--threads`` takes: far above any CPU's cores,
#: and below what torch can be given at all (a larger number is refused by
#: torch with an overflow error that names no option).
MAX_THREADS = 1024


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


def int_between(low, high):
    """An argparse type: an integer from ``low`` to ``high``, both included.

    Examples
    --------
    >>> int_between(1, 8)("8")
    8
    >>> int_between(1, 8)("9")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer from 1 to 8, got '9'
    """

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}"
            )
        return value

    parse.__name__ = f"int_between_{low}_{high}"
    return parse


# A random seed: what NumPy's RandomState takes.
seed = int_between(0, 2**32 - 1)
seed.__name__ = "seed"
# Torch threads: beyond about 2**31 torch fails with "Overflow when unpacking
# long", naming no option.
threads = int_between(1, MAX_THREADS)
threads.__name__ = "threads"


def path(text):
    """An argparse type: a file or folder name, not empty or blank (an empty
    name would silently mean the current folder, or no file at all).

    Examples
    --------
    >>> path("out")
    'out'
    >>> path(" ")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a file or folder name, got ' '
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected a file or folder name, got {text!r}"
        )
    return text


def _bounded_float(text, bound, within):
    """``text`` as a finite float for which ``within(value)`` holds, else the
    ArgumentTypeError naming ``bound`` (">= 0", "> 0"): the bound of the
    option it was given to."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number {bound}, got {text!r}"
        ) from None
    if not (within(value) and value < float("inf")):  # NaN fails within
        raise argparse.ArgumentTypeError(
            f"expected a finite number {bound}, got {text!r}"
        )
    return value + 0.0  # "-0" is 0, not -0.0 (printed as -0.0 in JSON)


def nonnegative_float(text):
    return _bounded_float(text, ">= 0", lambda value: value >= 0)


def positive_float(text):
    """An argparse type: a finite number > 0 (told that bound, not ">= 0":
    0 is refused too).

    Examples
    --------
    >>> positive_float("0.5")
    0.5
    >>> positive_float("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a finite number > 0, got '-1'
    """
    return _bounded_float(text, "> 0", lambda value: value > 0)


def fraction(text):
    """An argparse type: a number in [0, 1].

    Examples
    --------
    >>> fraction("0.5")
    0.5
    >>> fraction("5")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a number in [0, 1], got '5'
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value + 0.0  # "-0" is 0, not -0.0


def open_fraction(text):
    """An argparse type: a number strictly between 0 and 1.

    Examples
    --------
    >>> open_fraction("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a number in (0, 1), got '1'
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def model_list(text):
    """An argparse type: model names separated by commas, read as one csv
    line (a name holding a comma or a quote is quoted as in csv:
    ``'"a,b",c'``). Names are kept as written, spaces included; blank ones
    are skipped. :func:`resolve_models` matches them to a pool.

    Examples
    --------
    >>> model_list('a, b,"c,d"')
    ['a', ' b', 'c,d']
    """
    try:
        rows = list(csv.reader([text], strict=True))
    except csv.Error as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated model names (a name with a comma, quote or "
            f"line break in double quotes, as in csv), got {text!r}: {exc}"
        ) from None
    models = [m for row in rows for m in row if m.strip()]
    if not models:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated model names, got {text!r}"
        )
    return models


def resolve_models(models, pool):
    """The names of ``models`` (from :func:`model_list`) as ``pool`` spells
    them: a name of the pool as written is that model; otherwise spaces
    around it are not part of the name (``--models "a, b"``).

    Examples
    --------
    >>> resolve_models([" b", " padded "], ["b", " padded "])
    ['b', ' padded ']
    """
    names = set(pool)
    return [m if m in names else m.strip() for m in models]
