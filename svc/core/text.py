"""Display text: names and descriptions shown in mails, pages and other people's lists.

A NUL, an escape sequence or a bidi override in a name lets one user make another
user's mail or page read differently from what is stored (`\u202e` turns
"invoice_txt.exe" around). Such characters are refused with a 400 naming the field
rather than stripped, so what is stored is what was sent.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated

from pydantic import AfterValidator

# Bidi embeddings, overrides and isolates, and the marks that steer them.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Line breaks a multi-line description may carry.
LINE_BREAKS = frozenset("\n\r\t")


def refused_character(value: str, multiline: bool) -> str | None:
    """The first character a display text may not hold, or None."""
    for char in value:
        if multiline and char in LINE_BREAKS:
            continue
        if char in BIDI_CONTROLS or char in "\u2028\u2029" or unicodedata.category(char) == "Cc":
            return char
    return None


def check_single_line(value: str) -> str:
    """A name: no control characters (line breaks included) and no bidi controls."""
    char = refused_character(value, multiline=False)
    if char is not None:
        raise ValueError(f"must not contain control or bidi characters (found U+{ord(char):04X})")
    return value


def check_multi_line(value: str) -> str:
    """A description: line breaks and tabs allowed, other control and bidi characters not."""
    char = refused_character(value, multiline=True)
    if char is not None:
        raise ValueError(f"must not contain control or bidi characters (found U+{ord(char):04X})")
    return value


DisplayName = Annotated[str, AfterValidator(check_single_line)]
DisplayText = Annotated[str, AfterValidator(check_multi_line)]
