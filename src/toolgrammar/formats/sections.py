"""Reading a block that holds several calls (a *section*: DeepSeek, Kimi), shared by those formats' readers.

A section reader walks its section call by call, resuming after the last complete call, so a marker
inside an argument never ends the section. Each call read is an :class:`Item` (a name and arguments, or
an error); the section is a :class:`SectionCut` of items, and :func:`check_section` turns it into one
checked :class:`~toolgrammar.formats.calls.Block` per call.

The readers are built from the scanning helpers here, which share one protocol: each takes the text so
far, an offset and ``final`` (whether the turn has ended), and returns the offset past what it read;
it raises :class:`NeedMore` when the text ends inside the piece (more text decides) and
:class:`BrokenMarkup` when the markup is not what the format writes (:func:`resync_call` then makes
the call one error item and reading resumes after it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolgrammar.formats.calls import Block, CallError
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import JsonValueScanner, json_error_kind
from toolgrammar.formats.text import partial_suffix

if TYPE_CHECKING:
    from toolgrammar.schema import ToolSet

WHITESPACE = " \t\r\n"
"""The whitespace a section allows between its pieces."""


class NeedMore(Exception):
    """The text so far ends inside this piece: more text decides."""


@dataclass(frozen=True)
class Item:
    """One call (or one broken stretch) of a section, as read."""

    start: int
    end: int
    closed: bool
    name: str | None = None
    arguments: Any = None
    error: CallError | None = None


@dataclass
class SectionCut:
    """Where one section lies and the calls read in it."""

    start: int
    end: int
    closed: bool
    items: list[Item] = field(default_factory=list)


def json_error(error: Exception) -> CallError:
    """``raw-newline-in-string`` when JSON stopped at a literal line break inside a string, else ``invalid-json``."""
    return CallError(json_error_kind(error), f"error: tool call arguments are not valid JSON: {error}")


def malformed(message: str) -> CallError:
    """A ``malformed-block`` error: the markup of a call (or of the section) is not what the format writes."""
    return CallError("malformed-block", f"error: malformed tool call: {message}")


def excerpt(text: str, pos: int) -> str:
    """A short quote of the text at ``pos``, for error messages."""
    return repr(text[pos : pos + 24]) if pos < len(text) else "the end of the turn"


class BrokenMarkup(Exception):
    """The markup broke at ``pos``; ``json``: the arguments never formed a JSON value (``invalid-json``)."""

    def __init__(self, pos: int, message: str, *, json: bool = False) -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.json = json


def expect(text: str, pos: int, word: str, final: bool, what: str) -> int:
    """``pos`` past ``word`` at ``pos``; :class:`NeedMore` when the text ends inside it; else :class:`BrokenMarkup`."""
    if text.startswith(word, pos):
        return pos + len(word)
    rest = text[pos:]
    if not final and len(rest) < len(word) and word.startswith(rest):
        raise NeedMore
    raise BrokenMarkup(pos, f"expected {word!r} {what}, found {excerpt(text, pos)}")


def skip_ws(text: str, pos: int) -> int:
    """``pos`` past any :data:`WHITESPACE`."""
    while pos < len(text) and text[pos] in WHITESPACE:
        pos += 1
    return pos


def until(text: str, pos: int, stop: str, final: bool, what: str, bad: str = "") -> int:
    """Offset of the first ``stop`` at or after ``pos`` (``bad`` characters may not come before it)."""
    end = text.find(stop, pos)
    if end == -1 and final:
        raise BrokenMarkup(len(text), f"the turn ended inside {what}")
    # A stop still being written at the end of the text may start with a ``bad`` character.
    limit = end if end != -1 else len(text) - partial_suffix(text, stop, pos)
    for c in bad:
        hit = text.find(c, pos, limit)
        if hit != -1:
            raise BrokenMarkup(hit, f"{what} holds {c!r}")
    if end == -1:
        raise NeedMore
    return end


def json_object_end(text: str, pos: int, final: bool) -> int:
    """End of the JSON object that starts at ``pos`` (after whitespace)."""
    start = skip_ws(text, pos)
    if start == len(text) and not final:
        raise NeedMore
    if not text.startswith("{", start):
        raise BrokenMarkup(start, f"the arguments are not a JSON object: {excerpt(text, start)}")
    done = JsonValueScanner().feed(text, start)
    if done >= 0:
        return done
    if final:  # never completes: the call ends at its closer (if any) and its JSON is invalid
        raise BrokenMarkup(start, "the JSON arguments never complete", json=True)
    raise NeedMore


def truncated(closer: str, detail: str = "") -> CallError:
    """A ``truncated`` error: the turn ended before ``closer``."""
    more = f" ({detail})" if detail else ""
    return CallError("truncated", f"error: tool call is truncated: the turn ended before {closer}{more}")


def resync_call(text: str, pos: int, broken: BrokenMarkup, closer: str, final: bool) -> Item:
    """The call at ``pos`` whose markup broke: one error item up to the call's next ``closer`` (the calls
    after it still read), or, with no closer, to the end of the turn (``truncated``); :class:`NeedMore`
    while the text may still bring the closer."""
    close = text.find(closer, broken.pos)
    if close != -1:
        if broken.json:
            error = CallError("invalid-json", f"error: tool call arguments are not valid JSON: {broken.message}")
        else:
            error = malformed(broken.message)
        return Item(pos, close + len(closer), True, error=error)
    if not final:
        raise NeedMore from None
    return Item(pos, len(text), False, error=truncated(closer, broken.message))


def check_section(text: str, cut: SectionCut, tools: ToolSet) -> tuple[Block, ...]:
    """One block per call of the section, each with its verdict."""
    out = []
    for item in cut.items:
        raw = text[item.start : item.end]
        if item.error is not None:
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=item.closed, error=item.error))
            continue
        verdict = check_call({"name": item.name, "arguments": item.arguments}, tools)
        if isinstance(verdict, CallError):
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=True, error=verdict))
        else:
            out.append(Block(raw=raw, body=raw, start=item.start, end=item.end, closed=True, call=verdict))
    return tuple(out)


__all__ = [
    "WHITESPACE",
    "BrokenMarkup",
    "Item",
    "NeedMore",
    "SectionCut",
    "check_section",
    "excerpt",
    "expect",
    "json_error",
    "json_object_end",
    "malformed",
    "resync_call",
    "skip_ws",
    "truncated",
    "until",
]
