"""Whole numbers read from the environment (``RANK``) and device strings (``cuda:1``): ASCII digits only.

``str.isdigit`` also says yes to '²', which ``int`` refuses (a crash where a bad value should be passed over),
and ``int`` takes other scripts' digits, signs, spaces and underscores, which no launcher writes.
"""
from __future__ import annotations


def is_digits(text: str) -> bool:
    """``[0-9]+``."""
    return text.isascii() and text.isdigit()


def parse_digits(text: str | None) -> int | None:
    """The number ``text`` writes in ASCII digits, else None."""
    return int(text) if text and is_digits(text) else None
