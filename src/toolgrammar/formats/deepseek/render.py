"""The canonical spelling of a DeepSeek section: what the chat template (V3, V3.1) or encoder (V3.2+) writes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolgrammar.formats.deepseek.shape import Variant


def dumps(value: Any) -> str:
    """JSON as the templates write it: ``json.dumps`` default separators, ``ensure_ascii=False``."""
    return json.dumps(value, ensure_ascii=False)


def render_param(v: Variant, key: str, value: Any) -> str:
    """One DSML parameter: a string raw (``string="true"``), anything else as JSON (``string="false"``)."""
    if isinstance(value, str):
        return f'{v.param_open}{key}" string="true">{value}{v.param_close}'
    return f'{v.param_open}{key}" string="false">{dumps(value)}{v.param_close}'


def render_one(v: Variant, name: str, arguments: dict[str, Any]) -> str:
    """One call inside a section."""
    if v.kind == "v3":
        return (
            f"{v.call_open}{v.call_type}{v.tool_sep}{name}{v.fence_open}{dumps(arguments)}{v.fence_close}{v.call_close}"
        )
    if v.kind == "v31":
        return f"{v.call_open}{name}{v.tool_sep}{dumps(arguments)}{v.call_close}"
    params = "\n".join(render_param(v, k, val) for k, val in arguments.items())
    return f'{v.call_open}{name}">\n{params}\n{v.call_close}'


def render_section(v: Variant, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """A whole section (the block) holding ``calls``."""
    body = v.call_separator.join(render_one(v, name, args) for name, args in calls)
    if v.dsml:
        return f"{v.section_open}\n{body}\n{v.section_close}"
    return f"{v.section_open}{body}{v.section_close}"


__all__ = ["dumps", "render_one", "render_param", "render_section"]
