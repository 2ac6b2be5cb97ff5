"""The block reader of the ``gpt-oss`` format (harmony): message headers, calls and message ends.

A harmony turn is a run of messages; the generation prompt already wrote the first
``<|start|>assistant``::

    <|channel|>analysis<|message|>REASONING<|end|>
    <|start|>assistant<|channel|>commentary<|message|>PREAMBLE<|end|>                  (optional)
    <|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{ARGS}   (<|call|>)
      or
    <|start|>assistant<|channel|>final<|message|>ANSWER                                 (<|return|>)

Mapping onto the shared turn reader (:mod:`toolgrammar.formats.reader`)
    ``reasoning_content`` is the analysis message that opens the turn (``think_open`` =
    ``<|channel|>analysis<|message|>``, ``think_close`` = ``<|end|><|start|>assistant``); a turn
    that does not open with it has no reasoning (``bare_think_close = False``: no bare closer makes
    earlier text reasoning). ``content`` is the bodies of the other messages without a recipient
    (``final``, a ``commentary`` preamble, any other channel), joined verbatim: their headers and
    the message ends ``<|end|>``, ``<|call|>``, ``<|return|>`` are *markup* cuts, dropped from the
    content (the reader's ``markup`` hook). A block is a message with a recipient.

Headers
    A header starts at ``<|start|>``, ``<|channel|>`` or `` to=`` (the recipient first, right
    after the prompt's ``<|start|>assistant``), and reads
    ``[<|start|>assistant][ to=R]<|channel|>CHANNEL[ to=R][ [<|constrain|>]TYPE]<|message|>``
    (the recipient in the role header, as openai-harmony and the HF template render history, or
    after the channel, as the harmony docs show the model writing it; the content type as
    `` <|constrain|>json``, `` json``, ``<|constrain|>json`` or absent). A header that breaks is
    not a header: it stays in the content as text (vLLM passes such text through), and the next
    candidate after its first character is tried. A header cut by the end of the turn is dropped,
    or, when it already named a recipient, a ``truncated`` block.

Blocks (messages with a recipient)
    ``functions.NAME``: the body is one JSON value, read string- and escape-aware (a ``<|call|>``
    inside a string stays in the string); the block ends after the value and the ``<|call|>`` /
    ``<|end|>`` / ``<|return|>`` that follows it, or at the end of the turn (the stop token
    ``<|call|>`` is not part of the text). A value still open at the end of the turn is
    ``truncated``; a body that does not start like a JSON value runs to the next message end
    (``invalid-json``). Any other recipient (``python``, ``browser.search``: built-in tools) is an
    ``unknown-tool`` block running to the next message end. A call on the ``analysis`` channel is
    still a call (vLLM and llama.cpp read it so).

Checks
    ``truncated``, then strict ``json.loads`` (``raw-newline-in-string`` / ``invalid-json``), then
    :func:`toolgrammar.formats.checks.check_call` on ``{"name": NAME, "arguments": ARGS}``.

Streaming
    A header is re-read from its start as the text grows (it is at most :data:`MAX_HEADER`
    characters); the JSON scan resumes where it stopped. So each call costs time linear in its
    length, and streaming and one-shot parses agree by construction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from toolgrammar.formats.calls import Block, CallError, ToolCall
from toolgrammar.formats.checks import check_call
from toolgrammar.formats.json_text import JsonValueScanner, json_error_kind, loads
from toolgrammar.formats.reader import NOT_A_BLOCK, NotABlock, Opener
from toolgrammar.formats.reader import check_mode as check_reader_mode
from toolgrammar.formats.spec import format_spec

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers
    from toolgrammar.schema import ToolSet

MODES: tuple[str, ...] = ("strict",)

_SPEC = format_spec("toolgrammar.formats.gpt_oss")
RECIPIENT_PREFIX: str = _SPEC["block"]["recipient_prefix"]
MESSAGE_ENDS: tuple[str, ...] = tuple(_SPEC["block"]["message_ends"])
START = "<|start|>"
ROLE = "assistant"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
MESSAGE = "<|message|>"
TO = " to="
MAX_HEADER = 512
"""Longest header read; a longer run without ``<|message|>`` is text."""

_WORD = re.compile(r"[A-Za-z0-9_.+\-]+")
_RECIPIENT_END = re.compile(r"[\s<]")
_JSON_WS = " \t\r\n"


def check_mode(mode: str) -> None:
    """Raise ``ValueError`` for a parse mode this format does not have."""
    check_reader_mode("gpt-oss", mode, MODES)


@dataclass(frozen=True)
class Markup:
    """A header without a recipient, or a message end: dropped from the content, no block."""

    end: int
    markup: ClassVar[bool] = True


@dataclass(frozen=True)
class Message:
    """A message with a recipient, cut out of the turn."""

    start: int
    body_start: int
    body_end: int
    end: int
    closed: bool
    recipient: str
    channel: str | None


class _More(Exception):
    pass


class _Broken(Exception):
    pass


@dataclass(frozen=True)
class Header:
    end: int
    recipient: str | None
    channel: str | None


def _expect(text: str, pos: int, word: str) -> bool:
    """Whether ``word`` is at ``pos``; :class:`_More` when the text ends inside it."""
    if text.startswith(word, pos):
        return True
    rest = text[pos : pos + len(word)]
    if len(rest) < len(word) and word.startswith(rest):
        raise _More
    return False


def _token(text: str, pos: int, pattern: re.Pattern[str]) -> tuple[str, int]:
    """The run of ``pattern`` characters at ``pos`` (more text may extend it: :class:`_More` at the end)."""
    m = pattern.match(text, pos)
    if m is None:
        if pos >= len(text):
            raise _More
        raise _Broken
    if m.end() >= len(text):
        raise _More
    return m.group(), m.end()


def _recipient(text: str, pos: int) -> tuple[str, int]:
    m = _RECIPIENT_END.search(text, pos)
    if m is None:
        raise _More
    if m.start() == pos:
        raise _Broken
    return text[pos : m.start()], m.start()


class _HeaderState:
    """What a header read found so far (for the end-of-turn verdict on a cut header)."""

    recipient: str | None = None


def read_header(text: str, start: int, state: _HeaderState) -> Header:
    """The header at ``start`` (:class:`_More`: the text ends inside it; :class:`_Broken`: not a header)."""
    pos = start
    if _expect(text, pos, START):
        pos += len(START)
        if not _expect(text, pos, ROLE):
            raise _Broken
        pos += len(ROLE)
    if _expect(text, pos, TO):
        state.recipient, pos = _recipient(text, pos + len(TO))
    channel = None
    if _expect(text, pos, CHANNEL):
        channel, pos = _token(text, pos + len(CHANNEL), _WORD)
        if state.recipient is None and _expect(text, pos, TO):
            state.recipient, pos = _recipient(text, pos + len(TO))
    elif state.recipient is None:
        raise _Broken  # neither a channel nor a recipient: not a header
    if not _expect(text, pos, MESSAGE):  # a content type first
        if _expect(text, pos, " "):
            pos += 1
        if _expect(text, pos, CONSTRAIN):
            pos += len(CONSTRAIN)
        _, pos = _token(text, pos, _WORD)
    if not _expect(text, pos, MESSAGE):
        raise _Broken
    return Header(pos + len(MESSAGE), state.recipient, channel)


class HeaderRead:
    """One header candidate read as the text grows, then (for a recipient) the message body."""

    __slots__ = ("_end_search", "_scanned", "_scanner", "header", "start", "state")

    def __init__(self, start: int) -> None:
        self.start = start
        self.state = _HeaderState()
        self.header: Header | None = None
        self._scanner: JsonValueScanner | None = None
        self._scanned = 0
        self._end_search = 0

    def advance(self, text: str, final: bool) -> Markup | Message | NotABlock | None:
        start = self.start
        for end in MESSAGE_ENDS:
            if text.startswith(end, start):
                return Markup(start + len(end))
        if self.header is None:
            self.state = _HeaderState()
            try:
                self.header = read_header(text, start, self.state)
            except _Broken:
                return NOT_A_BLOCK
            except _More:
                if len(text) - start > MAX_HEADER:
                    return NOT_A_BLOCK
                if not final:
                    return None
                if self.state.recipient is None:
                    return Markup(len(text))  # a header cut by the end of the turn: nothing to keep
                return Message(start, len(text), len(text), len(text), False, self.state.recipient, None)
            if self.header.end - start > MAX_HEADER:
                self.header = None
                return NOT_A_BLOCK
            if self.header.recipient is None:
                return Markup(self.header.end)
            self._scanned = self._end_search = self.header.end
            if self.header.recipient.startswith(RECIPIENT_PREFIX):
                self._scanner = JsonValueScanner()
        return self._body(text, final)

    def _body(self, text: str, final: bool) -> Message | None:
        h = self.header
        assert h is not None and h.recipient is not None
        if self._scanner is not None and self._scanner.state != "broken":
            done = self._scanner.feed(text, self._scanned) if self._scanner.state != "done" else self._scanned
            self._scanned = len(text) if done == -1 else done
            if done == -1:
                if not final:
                    return None
                return Message(self.start, h.end, len(text), len(text), False, h.recipient, h.channel)
            if done >= 0:
                self._scanned = done
                after = done
                while after < len(text) and text[after] in _JSON_WS:
                    after += 1
                for end in MESSAGE_ENDS:
                    if text.startswith(end, after):
                        return Message(self.start, h.end, done, after + len(end), True, h.recipient, h.channel)
                rest = text[after:]
                if not final and any(len(rest) < len(e) and e.startswith(rest) for e in MESSAGE_ENDS):
                    return None
                return Message(self.start, h.end, done, done, True, h.recipient, h.channel)
        # No JSON to follow (a built-in recipient, or a body that is not a JSON value): the next message end.
        found = [(p, e) for e in MESSAGE_ENDS if (p := text.find(e, self._end_search)) != -1]
        if found:
            pos, end = min(found)
            return Message(self.start, h.end, pos, pos + len(end), True, h.recipient, h.channel)
        if final:
            return Message(self.start, h.end, len(text), len(text), True, h.recipient, h.channel)
        self._end_search = max(h.end, len(text) - max(map(len, MESSAGE_ENDS)) + 1)
        return None


class GptOssBlocks:
    """The gpt-oss :class:`~toolgrammar.formats.reader.BlockReader` (module docstring)."""

    modes: ClassVar[tuple[str, ...]] = MODES
    block_ends_reasoning: ClassVar[bool] = False
    bare_think_close: ClassVar[bool] = False

    def __init__(self, mode: str, markers: Markers) -> None:
        check_mode(mode)
        self.mode = mode
        self.markers = markers
        self.openers: tuple[Opener, ...] = (
            Opener(START),
            Opener(CHANNEL),
            Opener(TO),
            *(Opener(e) for e in MESSAGE_ENDS),
        )

    def open_block(self, start: int, opener: Opener) -> HeaderRead:
        return HeaderRead(start)

    def check(self, text: str, cut: Message, tools: ToolSet) -> Block:
        raw, body = text[cut.start : cut.end], text[cut.body_start : cut.body_end]
        verdict = check_message(cut, body, tools)
        if isinstance(verdict, CallError):
            return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, error=verdict)
        return Block(raw=raw, body=body, start=cut.start, end=cut.end, closed=cut.closed, call=verdict)


def check_message(cut: Message, body: str, tools: ToolSet) -> ToolCall | CallError:
    """The verdict on one message with a recipient: a valid call, or the first failing check."""
    if not cut.closed:
        return CallError("truncated", f"error: tool call to {cut.recipient!r} is truncated: the turn ended inside it")
    if not cut.recipient.startswith(RECIPIENT_PREFIX):
        return CallError(
            "unknown-tool",
            f"error: the message is addressed to {cut.recipient!r}, not to a function ({RECIPIENT_PREFIX}NAME)",
        )
    try:
        arguments = loads(body)
    except RecursionError:
        return CallError("invalid-json", "error: tool call arguments are not valid JSON: nesting too deep")
    except ValueError as error:
        return CallError(json_error_kind(error), f"error: tool call arguments are not valid JSON: {error}")
    return check_call({"name": cut.recipient[len(RECIPIENT_PREFIX) :], "arguments": arguments}, tools)


__all__ = ["MODES", "GptOssBlocks", "HeaderRead", "Markup", "Message", "check_message", "read_header"]
