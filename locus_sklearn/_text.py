"""Text shown to a person: model names and queries read from files, escaped
where they would not show as themselves.

Torch-free, for the command line and the plots alike.
"""

__all__ = ["printable"]


def printable(text):
    """``text`` with every character that is not printable (``str.isprintable``:
    control characters such as ESC, format characters, separators other than
    the space, lone surrogates) written as its escape, as ``repr`` writes it.

    A name read from a file (a model named ``"a\\x1b[2J"``) is shown as
    text rather than sent to the terminal, where an escape sequence would
    clear the screen or set the window title; in a figure, a lone surrogate
    (which ``fit`` accepts in a name) made matplotlib fail at drawing.

    Examples
    --------
    >>> print(printable("gpt\\x1b[2J-4o"))
    gpt\\x1b[2J-4o
    >>> printable("modèle 日本語")
    'modèle 日本語'
    >>> print(printable("mod\\udce8le"))
    mod\\udce8le
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
