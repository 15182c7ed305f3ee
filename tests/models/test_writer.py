"""paritygate.models.writer, the one writer of config text from names a model or a file gives (issue 38): whatever
the name, it reads back as exactly itself, as one value or one key, and a comment holding it stays one comment."""

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paritygate.models import writer

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

FAST = settings(max_examples=300, deadline=None, derandomize=True)
# TOML's own characters, line and paragraph ends, controls, bidi overrides, quotes of every kind, any other text
TOML_SIGNIFICANT = '"\'\\\n\r\t\x00\x08\x0b\x0c\x1b\x7f\x85\u2028\u2029\u202e\ufeff[]{}=#.,: '
NAMES = st.text(st.sampled_from(TOML_SIGNIFICANT) | st.characters(exclude_categories=("Cs",)), max_size=40)


@FAST
@given(value=NAMES)
def test_a_string_reads_back_as_itself_on_one_line(value):
    text = writer.string(value)
    assert "\n" not in text and "\r" not in text
    assert tomllib.loads(f"k = {text}\n") == {"k": value}


@FAST
@given(name=NAMES, value=NAMES)
def test_a_key_is_one_key_whatever_it_holds(name, value):
    doc = tomllib.loads(f"[t]\n{writer.key(name)} = {writer.string(value)}\n")
    assert doc == {"t": {name: value}}
    doc = tomllib.loads(f"[models.inputs.{writer.key(name)}]\nshape = [1]\n")  # a table header
    assert doc == {"models": {"inputs": {name: {"shape": [1]}}}}


@FAST
@given(names=st.lists(NAMES, max_size=4))
def test_a_comment_holding_names_stays_one_comment(names):
    text = "a = 1\n# " + writer.comment(f"reference outputs: {', '.join(map(writer.string, names))}") + "\nb = 2\n"
    assert tomllib.loads(text) == {"a": 1, "b": 2}
    assert writer.array(names) and tomllib.loads(f"k = {writer.array(names)}")["k"] == names


def test_the_issues_output_key_stays_a_name():
    key = 'y\n[models.beam]\nhandler = "evil_sm.pwn:make"\n#'
    doc = tomllib.loads(f"[models]\n# reference outputs: {writer.comment(writer.string(key))}\n"
                        f"[models.outputs]\n{writer.key(key)} = {writer.string(key)}\n")
    assert doc == {"models": {"outputs": {key: key}}}


def test_a_lone_surrogate_cannot_be_written_and_says_so():
    with pytest.raises(ValueError, match=r"lone surrogate \(U\+D800\), which a TOML file cannot hold"):
        writer.string("a\ud800")
