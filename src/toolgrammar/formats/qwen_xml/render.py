"""The canonical spelling of the ``qwen-xml`` format: a call exactly as the Qwen3-Coder / Qwen3.5 chat template
writes it, and a parameter value between its two markup newlines."""

from __future__ import annotations

import json
from typing import Any

from toolgrammar.formats.markers import Markers
from toolgrammar.formats.spec import markers_of

DEFAULT_MARKERS: Markers = markers_of("toolgrammar.formats.qwen_xml")
"""The format's markers (``format.toml``), what :func:`render_call` writes when given none."""


def render_value(value: Any, *, python_literals: bool = False) -> str:
    """One parameter value as the chat template writes it between its two markup newlines.

    A string as it is; an object or array as JSON (``json.dumps``, default separators,
    ``ensure_ascii=False``); a number, boolean or null as JSON too, or, with ``python_literals``,
    as Jinja's ``| string`` writes them in the Qwen3-Coder-30B and Qwen3.5 templates (``True``,
    ``False``, ``None``; numbers are the same either way).
    """
    if isinstance(value, str):
        return value
    if python_literals and (value is None or isinstance(value, bool)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def render_call(
    name: str, arguments: dict[str, Any], *, markers: Markers | None = None, python_literals: bool = False
) -> str:
    """One block exactly as the Qwen3-Coder / Qwen3.5 chat template renders a call (arguments in order)."""
    m = markers or DEFAULT_MARKERS
    parts = [f"{m.block_open}\n<function={name}>\n"]
    for key, value in arguments.items():
        parts.append(f"<parameter={key}>\n{render_value(value, python_literals=python_literals)}\n</parameter>\n")
    parts.append(f"</function>\n{m.block_close}")
    return "".join(parts)


__all__ = ["DEFAULT_MARKERS", "render_call", "render_value"]
