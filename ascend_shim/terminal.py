"""Text from files and reports, made safe to print on a terminal.

A file name, a source snippet, a reason or a note may come from a repository or a report someone else wrote;
printed raw, a control character in it can erase or rewrite a line the shim printed, retitle the window, or
reorder what is shown (bidirectional overrides), and a newline can forge a whole line. Every piece of such text
the shim prints goes through :func:`printable`; JSON output needs nothing (``json`` escapes these itself).
"""
from __future__ import annotations

#: bidirectional formatting characters: they reorder the text shown around them
_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = (*range(0x20), *range(0x7F, 0xA0), *_BIDI, 0x2028, 0x2029)
_TABLE = {code: (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}") for code in _ESCAPED}


def printable(text) -> str:
    """``text`` (``str()`` of anything else) with every control, bidirectional-formatting and line-separator
    character written as its Python escape (``\\x1b``, ``\\x0a``, ``\\u202e``); other text unchanged."""
    text = text if isinstance(text, str) else str(text)
    return text if text.isprintable() else text.translate(_TABLE)
