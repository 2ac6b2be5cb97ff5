"""``toolgrammar grammar``: compile a tool list and show or export the grammar of the turn."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from toolgrammar.cli.app import app
from toolgrammar.errors import GrammarError, ToolgrammarError
from toolgrammar.formats import FORMAT_HELP
from toolgrammar.turn.exports import export as export_grammar
from toolgrammar.turn.grammar import compile_turn

EXPORTS = ("gbnf", "lark", "structural-tag")
"""The exports :mod:`toolgrammar.turn.exports` writes (kept here so that ``--help`` imports nothing heavy)."""
EXPORT_CHOICES = ("regex", "block-regex", "json", *EXPORTS)
"""Every value of ``--export``."""


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise SystemExit(2)


@app.command("grammar")
def grammar_command(
    tools: Annotated[Path, typer.Option("--tools", help="JSON file with the tool list (OpenAI format).")],
    mode: Annotated[
        str,
        typer.Option(
            help="Argument rule: 'schema' (each tool's JSON Schema) or 'strings' (the seed harness's rule: every "
            "argument a string). Default schema, as in `parse` and the library; `compare` defaults to strings "
            "to reproduce the seed harness's numbers."
        ),
    ] = "schema",
    format: Annotated[str, typer.Option("--format", help=FORMAT_HELP)] = "hermes",
    tool_choice: Annotated[str, typer.Option(help="'auto', 'required', 'none' or a tool name.")] = "auto",
    reasoning: Annotated[
        str,
        typer.Option(
            help="'enabled' (the turn may open with <think>...</think> or not), 'disabled' (no reasoning part) or "
            "'prefilled' (the generation prompt opened <think>). Default enabled, as in the library: it accepts "
            "turns with and without reasoning, so it fits a prompt it cannot see; `compare` defaults to disabled "
            "because there the option also sets the chat template's enable_thinking and its default model "
            "(Qwen2.5-Coder) has no reasoning part."
        ),
    ] = "enabled",
    whitespace: Annotated[str, typer.Option(help="'canonical' or 'flexible'.")] = "canonical",
    parallel_tool_calls: Annotated[bool, typer.Option(help="Allow several blocks.")] = True,
    escape_markers: Annotated[bool, typer.Option(help="Forbid the raw closing marker in string values.")] = False,
    export: Annotated[
        str | None,
        typer.Option(
            help="Print the grammar instead of its size: 'regex' (the whole turn, a Python regex with lookaheads), "
            "'block-regex' (one block), 'json' (stats), 'gbnf' (the whole turn in llama.cpp's GBNF: llama.cpp "
            "--grammar-file, Ollama, llama-cpp-python, xgrammar's EBNF reader), 'lark' (the whole turn as a lark "
            "grammar for llguidance, e.g. vLLM/SGLang with the llguidance backend) or 'structural-tag' (the "
            "whole turn as an xgrammar structural tag, JSON: xgrammar, vLLM, SGLang; refused where a tag cannot "
            "say the turn, e.g. qwen-xml). The GBNF and lark exports describe the turn's text; the golden files "
            "under grammars/ are written by `python -m toolgrammar.exports write grammars/`."
        ),
    ] = None,
) -> None:
    """Compile TOOLS into the grammar of an assistant turn; print its size, or export it for other engines."""

    if not tools.is_file():
        _fail(f"no such tools file: {tools}")
    start = time.perf_counter()
    try:
        grammar = compile_turn(
            str(tools),
            mode=mode,
            format=format,
            tool_choice=tool_choice,
            reasoning=reasoning,
            whitespace=whitespace,
            parallel_tool_calls=parallel_tool_calls,
            escape_markers=escape_markers,
        )
    except ToolgrammarError as error:
        _fail(str(error))
    elapsed_ms = (time.perf_counter() - start) * 1000
    try:
        whole = grammar.dfa
    except GrammarError:  # an array built an item at a time: there is no whole automaton to count
        whole = None
    stats = {
        "tools": list(grammar.tools.names),
        "options": json.loads(grammar.options.key),
        "dfa_states": whole.n_states if whole is not None else None,
        "nfa_states": whole.stats.get("nfa_states") if whole is not None else None,
        "compile_ms": round(elapsed_ms, 1),
        "fingerprint": grammar.fingerprint,
    }
    if export == "regex":
        typer.echo(grammar.to_regex())
    elif export == "block-regex":
        typer.echo(grammar.block_regex())
    elif export == "json":
        typer.echo(json.dumps(stats, indent=2))
    elif export in EXPORTS:
        try:
            typer.echo(export_grammar(grammar, export), nl=False)
        except ToolgrammarError as error:
            _fail(str(error))
    elif export is None:
        n_tools, n_states = len(stats["tools"]), stats["dfa_states"]
        states = (
            f"{n_states} automaton states"
            if n_states is not None
            else "automaton built as a turn goes (an array built an item at a time: no whole automaton)"
        )
        typer.echo(f"{n_tools} tools, {states}, compiled in {elapsed_ms:.1f} ms")
        typer.echo(f"options: {grammar.options.key}")
    else:
        _fail(f"unknown --export {export!r}; choose {', '.join(EXPORT_CHOICES)}")
