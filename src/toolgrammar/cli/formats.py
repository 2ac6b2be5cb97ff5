"""``toolgrammar formats``: the registered tool-call formats, and the vLLM tool-call parser that serves each."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from toolgrammar.cli.app import app
from toolgrammar.formats import get_format
from toolgrammar.integrations.vllm_plugin import tool_parsers


def format_rows() -> list[dict[str, str]]:
    """One row per registered format: its name, its ``--tool-call-parser`` name, its block opener, what it is."""
    rows = []
    for parser, (name, _) in tool_parsers().items():
        fmt = get_format(name)
        doc = (type(fmt).__doc__ or "").strip()
        rows.append(
            {
                "format": name,
                "vllm_tool_parser": parser,
                "block_open": fmt.markers.block_open,
                "description": doc.splitlines()[0] if doc else "",
            }
        )
    return rows


@app.command("formats")
def formats_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON instead of a table.")] = False,
) -> None:
    """List the tool-call formats: the name for --format, the vLLM --tool-call-parser name, the block opener."""
    rows = format_rows()
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    width = max(len(r["format"]) for r in rows)
    parser_width = max(len(r["vllm_tool_parser"]) for r in rows)
    typer.echo(f"{'format':<{width}}  {'--tool-call-parser':<{parser_width}}  block opener")
    for r in rows:
        typer.echo(f"{r['format']:<{width}}  {r['vllm_tool_parser']:<{parser_width}}  {r['block_open']!r}")


__all__ = ["format_rows", "formats_command"]
