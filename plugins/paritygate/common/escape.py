"""The one escaping layer: every string a report, a config comment or a terminal line shows that came from data
(a model's tensor and node names, a report JSON's records, a message of a tool, a shadow dataset) passes through
one of these at the renderer, whatever the source of the record. Nothing from data becomes markup: no heading,
table row or column, link, HTML element or attribute, and no line break.

    md_text(value)         Markdown text on one line: every character Markdown reads as markup backslash-escaped
    md_code(value, cell)   Markdown inline code on one line (``cell``: inside a GFM table cell)
    html_text(value)       HTML text, also for a quoted attribute value
    safe_href(url)         a link target only when its scheme is safe (http, https, a '#fragment'), else None
    one_line(value)        plain text on one line: control characters (ANSI colour codes, newlines) removed

Markdown: CommonMark's backslash escapes make any ASCII punctuation literal; inline code shows its content
literally (no escape works inside it except GFM's ``\\|`` in a table cell), so code is fenced with more backticks
than any run inside it. HTML: ``html.escape`` with quotes, characters XML cannot hold replaced by U+FFFD.
"""

import html
import re
import unicodedata
from urllib.parse import urlsplit

_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")  # CSI, OSC and 2-byte escapes
# punctuation that opens Markdown (or GitHub's math) anywhere; "_" only where it can: not between two letters or
# digits (CommonMark: an intraword "_" neither opens nor closes emphasis), so matches_reference stays as it is
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>#!|~&$]|(?<![^\W_])_|_(?![^\W_])")
# a line's start that opens a block: "1. " / "1) " (numbered item), "- " / "+ " (bullet), "---" / "===" (a rule or
# an underline); "-0.5" opens none
_MD_LEAD = re.compile(r"^(?:\d{1,9}(?P<num>[.)])(?= |$)|(?P<bullet>[-+])(?= |$)|(?P<rule>[-=])(?=[-= ]*$))")
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
SAFE_SCHEMES = ("http", "https")


def one_line(value):
    """``value`` as text on one line: ANSI escape sequences dropped, every other control character and line or
    paragraph separator (newline, CR, tab, U+2028, U+0085) a space, runs of white space one space, ends stripped."""
    text = _ANSI.sub("", str(value))
    return " ".join("".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text).split())


def md_text(value):
    """Markdown text of ``value`` on one line: Markdown's metacharacters backslash-escaped, so that it is shown
    as written and opens no heading, emphasis, link, code span, HTML, entity or table column."""
    text = _MD_SPECIAL.sub(lambda m: "\\" + m[0], one_line(value))
    lead = _MD_LEAD.match(text)
    if lead:
        at = lead.end() - 1  # the marker is the match's last character
        text = f"{text[:at]}\\{text[at:]}"
    return text


def md_code(value, cell=False):
    """``value`` as a Markdown code span on one line, fenced with more backticks than any run inside it;
    ``cell``: it sits in a GFM table cell, where ``|`` must be written ``\\|`` (GFM shows it as ``|``)."""
    text = one_line(value)
    if cell:
        text = text.replace("|", "\\|")
    if not text:
        return "` `"
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value):
    """HTML text of ``value`` (element content or a quoted attribute value): ``& < > " '`` escaped, characters
    XML cannot hold replaced by U+FFFD."""
    return html.escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


def safe_href(url):
    """``url`` when it is a link a report may hold: an http(s) URL or a '#fragment' of the page; else None
    (``javascript:``, ``data:``, ``vbscript:``, ``file:`` and anything else)."""
    text = str(url)
    if text.startswith("#"):
        return text
    if any(unicodedata.category(ch) in ("Cc", "Zs", "Zl", "Zp") for ch in text):
        return None  # 'java\tscript:' is javascript: to a browser
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    return text if parts.scheme.lower() in SAFE_SCHEMES and parts.netloc else None
