"""Text that comes from a Function, made safe to keep and to show.

One cap for every message field (the first and last parts are kept, the middle is
counted), and control characters made visible for terminals, Markdown and JUnit: an
ANSI escape, a NUL, a BEL or a lone surrogate in an exception message is shown as
``\\x1b``, ``\\x00``, ``\\x07``, ``\\udc80`` instead of acting on the reader's screen
or crashing a UTF-8 writer.
"""

from __future__ import annotations

import re

#: Characters kept of any message field (half from its start, half from its end).
MESSAGE_LIMIT = 8000

#: C0 controls but tab and newline, DEL, C1 controls, lone surrogates, and the
#: bidirectional overrides that reorder what a terminal shows.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069]")


def cap(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` whole when short, else its first and last ``limit // 2`` characters and a count."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    dropped = len(text) - 2 * half
    return f"{text[:half]}\n... [{dropped} characters truncated] ...\n{text[-half:]}"


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, keep_newlines: bool = True) -> str:
    """Control characters and lone surrogates written as escapes (newlines kept or escaped)."""
    text = _CONTROL.sub(_escape, str(text))
    if not keep_newlines:
        text = text.replace("\n", "\\n")
    return text


def safe_str(obj: object) -> str:
    """``str(obj)``, or a placeholder when its ``__str__`` raises (whatever it raises).

    A hanging ``__str__`` is ended by the case's time limit, around the caller.
    """
    try:
        text = str(obj)
        if not isinstance(text, str):
            raise TypeError("__str__ returned a non-string")
        return text
    except BaseException as e:  # noqa: BLE001 (a KeyboardInterrupt from __str__ is the Function's)
        from harness.core.errors import CaseTimeout

        if isinstance(e, CaseTimeout):
            raise
        return f"<unprintable {type(obj).__name__}: its __str__ raised {type(e).__name__}>"


def safe_repr(obj: object) -> str:
    """``repr(obj)``, or a placeholder when its ``__repr__`` raises."""
    try:
        text = repr(obj)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
        return text
    except BaseException as e:  # noqa: BLE001
        from harness.core.errors import CaseTimeout

        if isinstance(e, CaseTimeout):
            raise
        return f"<unreprable {type(obj).__name__}: its __repr__ raised {type(e).__name__}>"
