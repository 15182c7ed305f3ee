"""The one writer of config text: every string a model or a file contributes to a config (``paritygate init``'s
starter config, the ``[models.precision]`` snippet a divergence check proposes) is written through these, so that
whatever a tensor, node, file or folder is named, the config parses to exactly the keys the suite meant and no
name becomes config.

    string(value)     a TOML basic string: ``"`` and ``\\`` escaped, every character that is not printable
                      (newline, CR, tab, DEL, U+2028, bidi overrides, ...) as a \\u escape
    key(name)         a TOML key: bare when it is letters, digits, ``_`` and ``-``, else a quoted ``string``
    array(values)     a TOML array of strings
    comment(text)     a comment's text on one line: no character of it can end the comment

A name that TOML cannot hold at all (a lone surrogate, which is no Unicode scalar value) is a ``ValueError``
naming it; ``paritygate init`` turns it into one error line.
"""

import re

from paritygate.common.escape import one_line

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def string(value):
    """``value`` as a TOML basic string (``tomllib.loads(f"k = {string(v)}")["k"] == v`` for every str ``v``
    without lone surrogates)."""
    text = str(value)
    return '"' + "".join(_char(ch, text) for ch in text) + '"'


def _char(ch, text):
    if ch in _SHORT:
        return _SHORT[ch]
    if ch.isprintable():
        return ch
    code = ord(ch)
    if 0xD800 <= code <= 0xDFFF:
        raise ValueError(f"{text!r}: holds a lone surrogate (U+{code:04X}), which a TOML file cannot hold")
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def key(name):
    """``name`` as a TOML key: bare when TOML allows it, else quoted (a dotted or bracketed name stays one key)."""
    text = str(name)
    return text if _BARE.fullmatch(text) else string(text)


def array(values):
    """A TOML array of the strings ``values``."""
    return "[" + ", ".join(string(v) for v in values) + "]"


def comment(text):
    """``text`` fit for a TOML comment: on one line (ANSI codes dropped, control characters and line separators
    spaces), any other unprintable character (a bidi override) U+FFFD; names inside should come quoted
    (``string``), so that a reader sees where each begins and ends."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in one_line(text))
