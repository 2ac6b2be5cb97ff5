"""BFCL v4 coverage (issue 13, goal 1): does every function schema BFCL ships compile, and how fast?

    .venv/bin/python bench/bfcl_coverage.py              # every schema; writes bench/results/bfcl-coverage-<date>.*
    .venv/bin/python bench/bfcl_coverage.py --limit 50   # the first 50 distinct schemas; writes nothing

The schemas: every function doc of the installed ``bfcl-eval`` data (found as
:func:`toolgrammar.evaluate.bfcl.locate_data`
finds it, never imported): the ``function`` lists of every single-turn test file (``BFCL_v4_<category>.json``,
Java and JavaScript included), and the docs of ``multi_turn_func_doc/`` that the multi-turn, memory and web-search
categories give their models (same format, plus a ``response`` key: the return value's description). Each is
converted as :func:`toolgrammar.evaluate.bfcl.to_openai_tools` converts it for its category (BFCL's language hint and
``convert_to_tool``; the multi-turn docs with the Python hint), and counted once per distinct tool (canonical JSON
of the converted tool: sorted keys). The multi-turn docs' ``response`` key is removed before compiling (it is not
part of the parameters schema, and ``load_tools`` takes no such key in either mode; ``bfcl.grammar_tools`` drops it
with a note); the report counts them.

Per schema, from empty in-memory caches (validated tools, shared automata, tool tails, the turn skeleton: what a
fresh process pays, the Qwen3 vocabulary aside, loaded once before) and with the on-disk cache off, one timed run of:

1. ``load_tools([tool])`` (strict); on a ``ToolSchemaError``, ``load_tools([tool], lenient=True)``, its
   ``ToolSchemaWarning``s recorded; on a second ``ToolSchemaError`` the schema is *refused*;
2. ``compile_turn(toolset, tool_choice=<its name>, cache=False)``, then
   ``TokenGrammar(turn, qwen3_vocabulary()).build_all()``: the whole automaton (checked: no stub left) and its
   token-level distances over the 151,669-token vocabulary. A ``ToolSchemaError`` here (a schema too large to build)
   also counts as refused.

A refused schema then goes through :func:`toolgrammar.evaluate.bfcl.grammar_tools` (strict, lenient, then BFCL's own
type
names mapped) and is compiled again: the
report says which ones the side-by-side mode can still run, and with what notes.

Reported: counts and percentages (strict / lenient / refused), per category; the lenient warnings and the refusal
reasons grouped by keyword; the time distribution (p50, p95, max) of the whole run per schema and of its parts;
every schema over 1 s; the slowest ten. ``bench/results/bfcl-coverage-<date>.md`` and ``.json`` (every schema's
record). The times are one run each on a shared machine: read the distribution, not a single figure.
"""

from __future__ import annotations

import os

os.environ["TOOLGRAMMAR_CACHE"] = "off"  # every compile from scratch: no entry read, none written

import argparse
import hashlib
import json
import statistics
import sys
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import machine_info, markdown_table, write_results

from toolgrammar import caches
from toolgrammar.errors import ToolgrammarError, ToolSchemaError, ToolSchemaWarning
from toolgrammar.evaluate import bfcl
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import load_tools
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.vocab import qwen3_vocabulary

SLOW_S = 1.0
"""The goal: every schema compiles in under a second."""
MULTI_TURN_DOCS = "multi_turn_func_doc"
MULTI_TURN_HINT = "multi_turn_base"
"""The category whose language hint the multi-turn docs get (Python's, as every multi-turn category)."""


@dataclass
class Schema:
    """One distinct converted tool and where BFCL uses it."""

    key: str
    """SHA-256 (first 16 hex digits) of the canonical JSON of the converted tool."""
    tool: dict[str, Any]
    """The converted tool as compiled (the multi-turn docs without ``response``)."""
    first: str
    """The first item (``<category>:<id>``) or doc file (``multi_turn_func_doc/<file>``) holding it."""
    categories: list[str] = field(default_factory=list)
    occurrences: int = 0
    response_removed: bool = False

    @property
    def name(self) -> str:
        return self.tool["function"]["name"]


def _canonical(tool: dict[str, Any]) -> str:
    return json.dumps(tool, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _read_lines(path: Path) -> list[dict[str, Any]] | None:
    """A JSON-lines file's objects, or ``None`` when it is not one (``format_sensitivity`` is one JSON object)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            return None
        if not isinstance(entry, dict):
            return None
        out.append(entry)
    return out


def collect(data: bfcl.BfclData) -> tuple[list[Schema], dict[str, Any]]:
    """Every distinct converted tool of the data, in file order, and what was read (for the report)."""
    by_key: dict[str, Schema] = {}
    sources: dict[str, Any] = {"single_turn": {}, "multi_turn_docs": {}, "skipped": {}}

    def add(tool: dict[str, Any], where: str, category: str) -> None:
        text = _canonical(tool)  # the tool as converted, response included
        schema = by_key.get(text)
        if schema is None:
            key = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
            response = "response" in tool["function"]
            if response:
                tool = {**tool, "function": {k: v for k, v in tool["function"].items() if k != "response"}}
            schema = by_key[text] = Schema(key, tool, where, response_removed=response)
        schema.occurrences += 1
        if category not in schema.categories:
            schema.categories.append(category)

    prefix = f"{bfcl.VERSION_PREFIX}_"
    for path in sorted(data.root.glob(f"{prefix}*.json")):
        category = path.stem[len(prefix) :]
        entries = _read_lines(path)
        if entries is None:
            sources["skipped"][path.name] = "not a JSON-lines test file"
            continue
        with_functions = [e for e in entries if isinstance(e.get("function"), list)]
        if not with_functions:
            classes = sorted({c for e in entries for c in e.get("involved_classes", ())})
            sources["skipped"][path.name] = (
                f"{len(entries)} items without a function list; their docs come from {MULTI_TURN_DOCS}/ "
                f"(classes: {', '.join(classes) or 'none'})"
            )
            continue
        count = 0
        for entry in with_functions:
            for tool in bfcl.to_openai_tools(entry["function"], category):
                add(tool, f"{category}:{entry['id']}", category)
                count += 1
        sources["single_turn"][category] = {"items": len(with_functions), "tools": count}
    for path in sorted((data.root / MULTI_TURN_DOCS).glob("*.json")):
        docs = _read_lines(path) or []
        label = f"{MULTI_TURN_DOCS}/{path.name}"
        for doc in docs:
            for tool in bfcl.to_openai_tools([doc], MULTI_TURN_HINT):
                add(tool, label, label)
        sources["multi_turn_docs"][path.name] = len(docs)
    return list(by_key.values()), sources


def forget() -> None:
    """Drop every in-memory cache a compile fills (what ``bench/toolgrammar_runner.py``'s ``fresh()`` drops)."""
    caches.clear()


def _error(error: BaseException, stage: str) -> dict[str, Any]:
    return {
        "stage": stage,
        "type": type(error).__name__,
        "keyword": getattr(error, "keyword", None),
        "pointer": getattr(error, "pointer", None),
        "message": str(error),
    }


def _load(tool: dict[str, Any]) -> tuple[Any, str, list[str], dict[str, Any] | None, dict[str, Any] | None]:
    """Strict, then lenient: (toolset or None, status, warnings, strict error, lenient error)."""
    try:
        return load_tools([tool]), "strict", [], None, None
    except ToolSchemaError as error:
        strict_error = _error(error, "strict load")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ToolSchemaWarning)
        try:
            toolset = load_tools([tool], lenient=True)
        except ToolSchemaError as error:
            return None, "refused", [], strict_error, _error(error, "lenient load")
    notes = [str(w.message) for w in caught if issubclass(w.category, ToolSchemaWarning)]
    return toolset, "lenient", notes, strict_error, None


def _build(toolset: Any, name: str, vocab: Any) -> tuple[dict[str, float], int]:
    """Compile the turn for ``name`` and force the whole automaton: (seconds per part, token-grammar states)."""
    choice = name if name not in ("auto", "required", "none") else "required"  # one tool: the same turn
    t0 = time.perf_counter()
    turn = compile_turn(toolset, tool_choice=choice, cache=False)
    t1 = time.perf_counter()
    grammar = TokenGrammar(turn, vocab)
    grammar.build_all()
    t2 = time.perf_counter()
    if grammar.auto.stubs:
        raise AssertionError(f"{name}: {len(grammar.auto.stubs)} tails left unbuilt after build_all()")
    return {"compile_turn_s": t1 - t0, "token_grammar_s": t2 - t1}, int(grammar.n_states)


def measure(schema: Schema, vocab: Any) -> dict[str, Any]:
    """One schema's record (see the module docstring)."""
    forget()
    record: dict[str, Any] = {
        "key": schema.key,
        "name": schema.name,
        "first": schema.first,
        "categories": schema.categories,
        "occurrences": schema.occurrences,
        "response_removed": schema.response_removed,
    }
    t0 = time.perf_counter()
    toolset, status, notes, strict_error, lenient_error = _load(schema.tool)
    t_load = time.perf_counter() - t0
    record.update(status=status, warnings=notes, strict_error=strict_error, error=lenient_error, load_s=t_load)
    if toolset is not None:
        try:
            parts, states = _build(toolset, schema.name, vocab)
        except ToolSchemaError as error:
            record.update(status="refused", error=_error(error, "compile"))
        else:
            record.update(parts, states=states, total_s=time.perf_counter() - t0)
    if record["status"] == "refused":
        record["adapted"] = adapt(schema, vocab)
    return record


def adapt(schema: Schema, vocab: Any) -> dict[str, Any]:
    """A refused schema through ``bfcl.grammar_tools`` (what the side-by-side mode does), compiled again."""
    forget()
    t0 = time.perf_counter()
    try:
        toolset, notes = bfcl.grammar_tools([schema.tool])
        _parts, states = _build(toolset, schema.name, vocab)
    except ToolgrammarError as error:
        return {"ok": False, "error": _error(error, "grammar_tools")}
    return {"ok": True, "notes": notes, "states": states, "total_s": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------ the report


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "n/a"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def _what(note: str) -> str:
    """A warning or note without its tool and pointer (``tool 'x', at /p: what``), for grouping."""
    _, _, rest = note.partition(": ")
    return rest or note


def _keyword_of(note: str) -> str:
    """The keyword a warning is about: the last segment of its pointer."""
    head = note.split(": ", 1)[0]
    pointer = head.rpartition(" at ")[2] if " at " in head else ""
    return pointer.rstrip("/").rpartition("/")[2] or "(entry)"


def _time_row(label: str, values: list[float]) -> list[str]:
    if not values:
        return [label, "0", "n/a", "n/a", "n/a", "n/a"]
    return [
        label,
        str(len(values)),
        _ms(statistics.median(values)),
        _ms(_quantile(values, 0.95)),
        _ms(max(values)),
        _ms(statistics.fmean(values)),
    ]


def report(records: list[dict[str, Any]], sources: dict[str, Any], info: dict[str, Any]) -> str:
    total = len(records)
    status = Counter(r["status"] for r in records)
    lines = [
        "# BFCL v4 coverage: every function schema, compiled alone",
        "",
        f"`{info['command']}`: {info['date']}, {info['cpu']} ({info['nproc']} usable cores, load "
        f"{info['load_average']}), Python {info['python']}. BFCL data: {info['bfcl']}. Each schema is converted "
        "as `toolgrammar.evaluate.bfcl.to_openai_tools` converts it, loaded strictly, else leniently, then "
        "compiled for a "
        "call to it (`compile_turn(..., tool_choice=<name>, cache=False)`) and built whole "
        "(`TokenGrammar(turn, qwen3_vocabulary()).build_all()`), from empty in-memory caches, on-disk cache off. "
        "Method: `bench/bfcl_coverage.py`'s docstring.",
        "",
        f"## {total} distinct schemas",
        "",
        markdown_table(
            ["outcome", "schemas", "share"],
            [
                ["strict (valid JSON Schema, compiled as is)", str(status["strict"]), _pct(status["strict"], total)],
                [
                    "lenient (`lenient=True`: warnings, then compiled)",
                    str(status["lenient"]),
                    _pct(status["lenient"], total),
                ],
                [
                    "refused (by lenient loading too, or at compile)",
                    str(status["refused"]),
                    _pct(status["refused"], total),
                ],
            ],
        ),
        "",
    ]
    adapted = [r for r in records if r["status"] == "refused" and r["adapted"]["ok"]]
    if status["refused"]:
        lines += [
            f"Of the {status['refused']} refused, {len(adapted)} compile once `bfcl.grammar_tools` has dropped "
            "BFCL's data slips (see below); the side-by-side mode runs those. Counted with them, "
            f"{status['strict'] + status['lenient'] + len(adapted)} of {total} "
            f"({_pct(status['strict'] + status['lenient'] + len(adapted), total)}) compile.",
            "",
        ]
    responses = sum(r["response_removed"] for r in records)
    if responses:
        lines += [
            f"{responses} schemas come from the multi-turn docs with a `response` key (the return value's "
            "description), removed before compiling: `load_tools` takes no such key in the function object, strict "
            "or lenient; `bfcl.grammar_tools` drops it with a note.",
            "",
        ]

    lines += ["## Per category", "", "A schema used by several categories counts in each.", ""]
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for r in records:
        for category in r["categories"]:
            per[category][r["status"]] += 1
    rows = []
    order = [*sources["single_turn"], *(f"{MULTI_TURN_DOCS}/{f}" for f in sources["multi_turn_docs"])]
    for category, counts in sorted(per.items(), key=lambda item: order.index(item[0])):
        n = sum(counts.values())
        rows.append(
            [
                category,
                str(n),
                str(counts["strict"]),
                str(counts["lenient"]),
                str(counts["refused"]),
                _pct(counts["strict"] + counts["lenient"], n),
            ]
        )
    lines += [markdown_table(["category", "schemas", "strict", "lenient", "refused", "strict + lenient"], rows), ""]
    read = sources["single_turn"]
    lines += [
        "Read: "
        + ", ".join(f"`{c}` ({v['items']} items, {v['tools']} tools)" for c, v in read.items())
        + "; "
        + ", ".join(f"`{MULTI_TURN_DOCS}/{f}` ({n} docs)" for f, n in sources["multi_turn_docs"].items())
        + ".",
        "Not read: " + "; ".join(f"`{f}`: {why}" for f, why in sources["skipped"].items()) + ".",
        "",
    ]

    lenient = [r for r in records if r["status"] == "lenient"]
    warned: Counter[str] = Counter()
    warned_schemas: Counter[str] = Counter()
    for r in lenient:
        for what in {_what(w) for w in r["warnings"]}:
            warned_schemas[what] += 1
        for w in r["warnings"]:
            warned[_what(w)] += 1
    lines += ["## Lenient loading: what it changed", ""]
    lines += [
        markdown_table(
            ["warning (tool and pointer left out)", "times", "schemas"],
            [[f"`{w}`", str(n), str(warned_schemas[w])] for w, n in warned.most_common()],
        )
        if warned
        else "Nothing.",
        "",
    ]

    refused = [r for r in records if r["status"] == "refused"]
    lines += ["## Refused: the reasons, by keyword", ""]
    if not refused:
        lines += ["None.", ""]
    else:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in refused:
            error = r["error"]
            keyword = error["keyword"] or ("(entry)" if error["stage"] != "compile" else "(size)")
            groups[f"{error['stage']}: {keyword}"].append(r)
        rows = []
        for group, members in sorted(groups.items(), key=lambda g: -len(g[1])):
            example = members[0]["error"]["message"]
            fixed = sum(m["adapted"]["ok"] for m in members)
            rows.append(
                [f"`{group}`", str(len(members)), f"{fixed} / {len(members)}", example[:220].replace("|", "\\|")]
            )
        lines += [
            markdown_table(["stage: keyword", "schemas", "compile after grammar_tools", "first example"], rows),
            "",
            "Lenient loading drops dirty spellings and contradictions (enum values of another type, keywords of "
            "another type, undeclared `required` names) with a warning each; what it still refuses is a constraint "
            "the grammar cannot enforce or a shape no JSON Schema reader takes. `bfcl.grammar_tools` maps what BFCL "
            "itself maps (type names), with a note each.",
            "",
        ]
        notes: Counter[str] = Counter()
        for r in adapted:
            for note in r["adapted"]["notes"]:
                if note.endswith("(bfcl.grammar_tools)"):
                    notes[_what(note).removesuffix(" (bfcl.grammar_tools)")] += 1
        if notes:
            lines += [
                "What `bfcl.grammar_tools` changed to make them compile:",
                "",
                markdown_table(["note", "times"], [[f"`{n}`"[:200], str(c)] for n, c in notes.most_common()]),
                "",
            ]
        if adapted:
            times = [r["adapted"]["total_s"] for r in adapted]
            lines += [
                f"Their compile through `bfcl.grammar_tools` (strict, lenient and adapted loads + `compile_turn` + "
                f"`build_all`): p50 {_ms(statistics.median(times))}, max {_ms(max(times))}.",
                "",
            ]
        still = [r for r in refused if not r["adapted"]["ok"]]
        if still:
            lines += ["Still refused after `bfcl.grammar_tools`:", ""]
            lines += [f"- `{r['name']}` ({r['first']}): {r['adapted']['error']['message'][:300]}" for r in still]
            lines += [""]

    compiled = [r for r in records if "total_s" in r]
    lines += [
        "## Compile time per schema",
        "",
        "Each schema once, from empty in-memory caches (the turn skeleton is rebuilt every time: what a fresh "
        "process pays for its first compile, the vocabulary aside). *whole*: strict load (and the lenient one "
        "after a refusal) + `compile_turn` + `TokenGrammar(...).build_all()`.",
        "",
        markdown_table(
            ["part", "schemas", "p50", "p95", "max", "mean"],
            [
                _time_row("whole", [r["total_s"] for r in compiled]),
                _time_row("load (strict, then lenient)", [r["load_s"] for r in compiled]),
                _time_row("compile_turn", [r["compile_turn_s"] for r in compiled]),
                _time_row("TokenGrammar + build_all", [r["token_grammar_s"] for r in compiled]),
                _time_row("whole, strict ones", [r["total_s"] for r in compiled if r["status"] == "strict"]),
                _time_row("whole, lenient ones", [r["total_s"] for r in compiled if r["status"] == "lenient"]),
            ],
        ),
        "",
    ]
    slow = [r for r in compiled if r["total_s"] >= SLOW_S]
    lines += [f"**Over {SLOW_S:g} s: {len(slow)}.**", ""]
    if slow:
        lines += [
            markdown_table(
                ["schema", "first seen", "whole", "states"],
                [[f"`{r['name']}`", r["first"], _ms(r["total_s"]), str(r["states"])] for r in slow],
            ),
            "",
        ]
    slowest = sorted(compiled, key=lambda r: -r["total_s"])[:10]
    lines += [
        "The slowest ten:",
        "",
        markdown_table(
            ["schema", "first seen", "outcome", "whole", "compile_turn", "TokenGrammar + build_all", "states"],
            [
                [
                    f"`{r['name']}`",
                    r["first"],
                    r["status"],
                    _ms(r["total_s"]),
                    _ms(r["compile_turn_s"]),
                    _ms(r["token_grammar_s"]),
                    str(r["states"]),
                ]
                for r in slowest
            ],
        ),
        "",
        f"Token-grammar states: p50 {statistics.median([r['states'] for r in compiled]):,.0f}, "
        f"max {max(r['states'] for r in compiled):,}."
        if compiled
        else "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N distinct schemas (writes nothing)")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    args = parser.parse_args(argv)

    data = bfcl.locate_data()
    schemas, sources = collect(data)
    if args.limit:
        schemas = schemas[: args.limit]
    vocab = qwen3_vocabulary()
    measure(schemas[0], vocab)  # warm-up, untimed: the vocabulary's token table, imports, first allocations
    records = []
    started = time.perf_counter()
    for index, schema in enumerate(schemas, start=1):
        records.append(measure(schema, vocab))
        if index % 250 == 0 or index == len(schemas):
            print(f"{index}/{len(schemas)} schemas, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    info = machine_info()
    info["command"] = "bench/bfcl_coverage.py" + (f" --limit {args.limit}" if args.limit else "")
    info["bfcl"] = data.source
    info["wall_s"] = time.perf_counter() - started
    markdown = report(records, sources, info)
    print(markdown)
    if not args.limit and not args.no_write:
        md, js = write_results("bfcl-coverage", markdown, {"machine": info, "sources": sources, "schemas": records})
        print(f"wrote {md} and {js}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
