"""``toolgrammar parse``: judge one assistant turn with the strict parser.

``--parse-mode`` picks how blocks are read: ``strict`` (both formats, the default), ``seed`` (hermes
only: the seed harness's regex) or ``lenient`` (qwen-xml only: a bare ``<function=`` and a missing
``</parameter>`` are read as calls, as servers recover them). A mode the format does not have is bad
input (exit 2).

Prints the turn parse (reasoning, content) and each block's verdict: the valid call, or the error
kind and the message the harness would send back to the model. Exit codes follow :mod:`toolgrammar.cli.app`:
0 every block is a valid call (or there is none: a final answer), 1 some block has an error,
2 bad input (a missing or unreadable turn file, a bad tool list, a bad option).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from toolgrammar.cli.app import app
from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats import FORMAT_HELP, get_format
from toolgrammar.turn.parser import parse_turn

ARGUMENT_MODES = ("schema", "strings")
PARSE_MODES = ("strict", "seed", "lenient")


FileArg = Annotated[
    Path,
    typer.Argument(
        help="Text file holding one assistant turn exactly as generated (after the generation prompt, "
        "before the stop token).",
        show_default=False,
    ),
]
ToolsOpt = Annotated[
    Path,
    typer.Option(
        "--tools",
        help='Tool list as JSON: OpenAI entries {"type": "function", "function": {...}}, bare '
        '{"name", "parameters"} entries, or {"tools": [...]}.',
        show_default=False,
    ),
]
ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="Argument checks: 'schema' (each tool's JSON Schema) or 'strings' (the seed harness's rule: "
        "every argument a string, required present, none unknown).",
    ),
]
ParseModeOpt = Annotated[
    str,
    typer.Option(
        "--parse-mode",
        help="Block reading: 'strict' (every format; a </tool_call> inside a JSON string stays in the string, "
        "every markup fault is an error), 'seed' (hermes only: the seed harness's exact regex, to reproduce its "
        "numbers) or 'lenient' (qwen-xml only: a bare <function=...> and a missing </parameter> are read as "
        "calls, as vLLM and llama.cpp recover them).",
    ),
]
FormatOpt = Annotated[str, typer.Option("--format", help=FORMAT_HELP)]
ReasoningOpt = Annotated[
    bool,
    typer.Option(
        "--reasoning-started",
        help="The generation prompt already opened <think> (Qwen3 Thinking-2507): the turn is reasoning "
        "up to its first </think>.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the parse as JSON instead of tables.")]


@app.command("parse")
def parse_command(
    file: FileArg,
    tools: ToolsOpt,
    mode: ModeOpt = "schema",
    parse_mode: ParseModeOpt = "strict",
    format: FormatOpt = "hermes",
    reasoning_started: ReasoningOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Parse one assistant turn strictly: reasoning, content, and each tool-call block's verdict.

    Exit code 0 when every block is a valid call (or the turn has none: a final answer), 1 when
    some block has an error, 2 on bad input.
    """

    if mode not in ARGUMENT_MODES:
        _fail(f"--mode {mode!r} is not one of: {', '.join(ARGUMENT_MODES)}")
    if parse_mode not in PARSE_MODES:
        _fail(f"--parse-mode {parse_mode!r} is not one of: {', '.join(PARSE_MODES)}")

    try:
        format_modes = get_format(format).parse_modes
    except ToolgrammarError as error:
        _fail(str(error))
    if parse_mode not in format_modes:
        has = ", ".join(format_modes)
        _fail(f"--parse-mode {parse_mode!r} does not exist for --format {format}; {format} has: {has}")
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(f"turn file {str(file)!r} does not exist")
    except IsADirectoryError:
        _fail(f"turn file {str(file)!r} is a directory, not a file")
    except UnicodeDecodeError as error:
        _fail(f"turn file {str(file)!r} is not UTF-8 text ({error.reason} at byte {error.start})")
    except OSError as error:
        _fail(f"turn file {str(file)!r} cannot be read: {error.strerror or error}")
    try:
        parsed = parse_turn(
            text,
            tools,
            format=format,
            mode=parse_mode,  # type: ignore[arg-type]
            reasoning_started=reasoning_started,
            tool_mode=mode,
        )
    except ToolgrammarError as error:  # ToolSchemaError (bad tools), GrammarError (unknown format)
        _fail(str(error))
    if as_json:
        report: dict[str, Any] = {
            "file": str(file),
            "format": format,
            "parse_mode": parse_mode,
            "tool_mode": mode,
            "ok": parsed.ok,
            "final_answer": parsed.is_final_answer,
            "errors_by_kind": dict(Counter(e.kind for e in parsed.errors)),
            **parsed.to_dict(),
        }
        typer.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        _print_human(file, parsed, format=format, parse_mode=parse_mode, mode=mode)
    # SystemExit, not typer.Exit: under standalone_mode=False typer *returns* an Exit's code instead of raising.
    raise SystemExit(0 if parsed.ok else 1)


def _fail(message: str) -> NoReturn:
    typer.echo(f"toolgrammar parse: {message}", err=True)
    raise SystemExit(2)


def _print_human(file: Path, parsed: Any, *, format: str, parse_mode: str, mode: str) -> None:
    console = Console(file=sys.stdout, width=max(120, Console(file=sys.stdout).width), highlight=False)
    console.print(Text(f"{file}  (format {format}, parse mode {parse_mode}, argument mode {mode})", style="bold"))
    turn = Table(show_header=False, box=None, padding=(0, 1))
    turn.add_column(style="bold", no_wrap=True)
    turn.add_column(overflow="fold")
    turn.add_row("reasoning", _text_or_none(parsed.reasoning_content))
    turn.add_row("content", _text_or_none(parsed.content))
    console.print(turn)
    if not parsed.blocks:
        console.print("no tool-call block: a final answer")
        return
    blocks = Table(title="blocks", title_justify="left", show_lines=True)
    blocks.add_column("#", justify="right", no_wrap=True)
    blocks.add_column("offsets", no_wrap=True)
    blocks.add_column("verdict", no_wrap=True)
    blocks.add_column("kind", no_wrap=True)
    blocks.add_column("call / message", overflow="fold")
    for index, block in enumerate(parsed.blocks, 1):
        where = f"{block.start}-{block.end}" + ("" if block.closed else " (unclosed)")
        if block.call is not None:
            detail = f"{block.call.name}({block.call.arguments_json()})"
            blocks.add_row(str(index), where, Text("valid", style="green"), "", Text(detail))
        else:
            error = block.error
            blocks.add_row(str(index), where, Text("error", style="red"), error.kind, Text(error.message))
    console.print(blocks)
    kinds = Counter(e.kind for e in parsed.errors)
    summary = f"{len(parsed.blocks)} block(s): {len(parsed.tool_calls)} valid, {sum(kinds.values())} error(s)"
    if kinds:
        summary += " (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")"
    console.print(summary)


def _text_or_none(value: str | None) -> Any:
    return Text(value) if value is not None else Text("(none)", style="dim")
