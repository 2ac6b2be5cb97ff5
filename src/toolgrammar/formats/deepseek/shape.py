"""The DeepSeek sub-formats as data: every literal the grammar writes and the parser reads, from ``format.toml``.

One :class:`Variant` per ``[variants.*]`` table. The grammar (:mod:`.grammar`) and the parser
(:mod:`.parser`) take every marker from here, so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from toolgrammar.formats.spec import format_spec, markers_of

if TYPE_CHECKING:
    from toolgrammar.formats.markers import Markers

PACKAGE = "toolgrammar.formats.deepseek"

Kind = Literal["v3", "v31", "dsml"]


@dataclass(frozen=True)
class Variant:
    """One DeepSeek sub-format: its section (the block) and how a call is written inside it."""

    key: str
    """``v3``, ``v31``, ``v32``, ``v4`` or ``v41`` (CanIToolCall's ``x-deepseek-*`` tags)."""
    kind: Kind
    section_open: str
    section_close: str
    call_open: str
    """What opens one call: ``<｜tool▁call▁begin｜>``, or ``<PREFIXinvoke name="`` for DSML."""
    call_close: str
    """What closes one call: ``<｜tool▁call▁end｜>``, or ``</PREFIXinvoke>``."""
    call_separator: str
    """What the template writes between two calls of a section."""
    tool_sep: str = ""
    call_type: str = ""
    fence_open: str = ""
    fence_close: str = ""
    prefix: str = ""
    param_open: str = ""
    """DSML: ``<PREFIXparameter name="``."""
    param_close: str = ""
    """DSML: ``</PREFIXparameter>``."""

    @property
    def dsml(self) -> bool:
        return self.kind == "dsml"


def _variant(key: str, table: dict[str, Any]) -> Variant:
    kind = table["kind"]
    if kind == "dsml":
        p, section = table["prefix"], table["section"]
        return Variant(
            key=key,
            kind="dsml",
            section_open=f"<{p}{section}>",
            section_close=f"</{p}{section}>",
            call_open=f'<{p}invoke name="',
            call_close=f"</{p}invoke>",
            call_separator="\n",
            prefix=p,
            param_open=f'<{p}parameter name="',
            param_close=f"</{p}parameter>",
        )
    fields = {k: v for k, v in table.items() if k != "kind"}
    return Variant(key=key, kind=kind, **fields)


@cache
def variants() -> dict[str, Variant]:
    """Every sub-format, by key, in the order of ``format.toml``."""
    return {key: _variant(key, table) for key, table in format_spec(PACKAGE)["variants"].items()}


@cache
def tokenizer_pins() -> tuple[tuple[str, tuple[str, str, str, str]], ...]:
    """Tokenizer repo prefix -> (variant, distribution pin, module, file), longest prefix first."""
    table = format_spec(PACKAGE)["tokenizers"]
    return tuple(sorted(((k, tuple(v)) for k, v in table.items()), key=lambda kv: -len(kv[0])))  # type: ignore[misc]


def variant_markers(v: Variant) -> Markers:
    """The markers of sub-format ``v``: the family's (``format.toml``), with ``v``'s section as the block."""
    return replace(markers_of(PACKAGE), block_open=v.section_open, block_close=v.section_close)


def section_openers() -> tuple[str, ...]:
    """The distinct section openers of every sub-format (V3 and V3.1 share theirs)."""
    return tuple(dict.fromkeys(v.section_open for v in variants().values()))


__all__ = ["PACKAGE", "Variant", "section_openers", "tokenizer_pins", "variant_markers", "variants"]
