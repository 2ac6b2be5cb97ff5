"""The data model of a parsed assistant turn, shared by every format's parser.

A turn is split into ``reasoning_content`` (the ``<think>`` part), ``content`` (free text, with no
markup) and ``blocks`` (every tool-call block found, valid or not). ``tool_calls`` are the valid
calls in emission order; each invalid block carries one :class:`CallError` with a machine-readable
``kind`` so that errors can be counted by kind (the side-by-side report does exactly that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

ErrorKind = Literal[
    "raw-newline-in-string",  # a literal newline inside a JSON string (the seed's most common failure)
    "truncated",  # a block with no closing marker: the turn hit its token limit
    "invalid-json",  # any other JSON syntax error
    "wrong-keys",  # the call object does not have exactly "name" and "arguments"
    "unknown-tool",  # the name is not an offered tool
    "arguments-not-object",  # "arguments" is not a JSON object
    "missing-argument",  # a required argument is absent
    "unknown-argument",  # an argument the schema does not list
    "wrong-type",  # strings mode: a value that is not a string
    "schema-violation",  # schema mode: jsonschema reports an error
    "missing-close-parameter",  # qwen-xml: a <parameter=...> without </parameter>
    "bare-function",  # qwen-xml: <function=...> without the <tool_call> opener
    "malformed-block",  # qwen-xml: a block whose markup is not <function=NAME>...</function>
]
"""Every kind of error the strict parser reports. The order is the order of the checks."""

ERROR_KINDS: tuple[str, ...] = ErrorKind.__args__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ToolCall:
    """A valid call: a known tool and arguments that passed every check."""

    name: str
    """The tool's name, exactly as offered."""
    arguments: dict[str, Any]
    """The decoded arguments (a JSON object)."""

    def arguments_json(self) -> str:
        """The arguments as the chat template renders them (``json.dumps``, ``ensure_ascii=False``)."""
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class CallError:
    """Why one block is not a valid call."""

    kind: ErrorKind
    """Machine-readable kind, one of :data:`ERROR_KINDS`."""
    message: str
    """The error string that goes back to the model as that call's result (``"error: ..."``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True)
class Block:
    """One tool-call block as found in the turn, with its verdict (exactly one of call / error)."""

    raw: str
    """The block's full text, markers included."""
    body: str
    """The text between the opening and closing markers (to the end of the turn if unclosed)."""
    start: int
    """Offset of the block's first character in the turn text."""
    end: int
    """Offset just past the block's last character."""
    closed: bool
    """Whether the closing marker was found."""
    call: ToolCall | None = None
    error: CallError | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "raw": self.raw,
            "start": self.start,
            "end": self.end,
            "closed": self.closed,
            "call": self.call.to_dict() if self.call else None,
            "error": self.error.to_dict() if self.error else None,
        }


@dataclass(frozen=True)
class TurnParse:
    """A whole assistant turn, parsed."""

    content: str | None
    """Free text with no markup; ``None`` when empty."""
    reasoning_content: str | None
    """The reasoning (``<think>`` part); ``None`` when there is none."""
    blocks: tuple[Block, ...] = field(default_factory=tuple)
    """Every block found, in order, valid or not."""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The valid calls, in emission order."""
        return tuple(b.call for b in self.blocks if b.call is not None)

    @property
    def errors(self) -> tuple[CallError, ...]:
        """One error per invalid block, in order."""
        return tuple(b.error for b in self.blocks if b.error is not None)

    @property
    def ok(self) -> bool:
        """True when no block has an error (a turn with no block is ok: it is a final answer)."""
        return not self.errors

    @property
    def is_final_answer(self) -> bool:
        """A turn with no block at all is the model's final answer."""
        return not self.blocks

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "blocks": [b.to_dict() for b in self.blocks],
        }
