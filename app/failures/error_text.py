"""An error told on one line, for people: its type and its message, a traceback in it folded to its error line.

Only for reading: nothing decides on this text (the policy and the recognisers use types).
"""

from __future__ import annotations

_TRACEBACK = "Traceback (most recent call last):"
LIMIT = 400  # characters of the message kept


def describe(e: BaseException) -> str:
    """``Type: message`` on one line, cut to a readable length. A message carrying a Python traceback (a failed
    Spark task's carries its worker's) keeps its first line and the traceback's own error line, not the frames."""
    text = _condensed(str(e))
    return f"{type(e).__name__}: {text[:LIMIT]}{'...' if len(text) > LIMIT else ''}"


def _condensed(text: str) -> str:
    """``text`` on one line; of a traceback in it, only the error line after its frames (for people to read)."""
    if _TRACEBACK not in text:
        return " ".join(text.split())
    head, _, frames = text.partition(_TRACEBACK)
    first = head.strip().splitlines()[0] if head.strip() else ""
    error = next((line for line in frames.splitlines()[1:] if line.strip() and not line[0].isspace()), "")
    return " ".join(f"{first} {error}".split())
