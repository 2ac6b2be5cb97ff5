"""The texts every export is judged on, shared by the export tests of each engine (``tests/turn/test_exports.py``:
xgrammar and llguidance; ``tests/integrations/test_llamacpp_gbnf.py``: llama.cpp itself).

:data:`CASES` (format, options) and :func:`turn_of` (the bundled tools' turn grammar under them);
:func:`export_texts` (canonical turns and malformed ones), :func:`mutations` of them and :func:`walks` of
the automaton. Imported as ``export_cases`` (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from toolgrammar.automata.nodes import EOS
from toolgrammar.bundled import bundled_tools_path
from toolgrammar.testing import accepts
from toolgrammar.turn.grammar import TurnGrammar, compile_turn

CASES: list[tuple[str, dict[str, Any]]] = [
    ("hermes", {}),
    ("hermes", {"tool_choice": "required"}),
    ("hermes", {"reasoning": "disabled"}),
    ("hermes", {"reasoning": "prefilled"}),
    ("hermes", {"tool_choice": "write_file", "reasoning": "disabled"}),
    ("hermes", {"tool_choice": "none"}),
    ("hermes", {"after_calls": "text", "parallel_tool_calls": False}),
    ("hermes", {"tool_choice": "required", "prose_first": True, "escape_markers": True}),
    ("qwen-xml", {}),
    ("qwen-xml", {"tool_choice": "required"}),
    ("qwen-xml", {"reasoning": "disabled"}),
    ("qwen-xml", {"reasoning": "prefilled", "tool_choice": "grep"}),
]


def case_id(case: tuple[str, dict[str, Any]]) -> str:
    fmt, options = case
    return fmt + ("-" + "-".join(f"{k}={v}" for k, v in options.items()) if options else "-default")


@cache
def turn_of(fmt: str, options: tuple[tuple[str, Any], ...]) -> TurnGrammar:
    return compile_turn(str(bundled_tools_path()), format=fmt, cache=False, **dict(options))


def export_texts(turn: TurnGrammar) -> tuple[list[str], list[str]]:
    """(canonical turns: calls, prose, reasoning; malformed turns) for the turn's format."""
    f = turn.format
    m = f.markers
    calls = [
        f.render_call("read_file", {"path": "src/app.py"}),
        f.render_call("list_files", {"path": "."}),
        f.render_call("grep", {"pattern": r"def \w+\(", "path": "src"}),
        f.render_call("write_file", {"path": "notes.txt", "content": 'line 1\nline "2" <b>\t caf\u00e9 \U0001f600'}),
        f.render_call("run_tests", {}),
        f.render_call("run_tests", {"path": "tests/test_app.py"}),
    ]
    two = calls[0] + m.call_separator + calls[3]
    think = f"{m.think_open}\nThe user wants the file. Let me read it.\n{m.think_close}\n\n"
    canonical = [
        *calls,
        two,
        "I will read the file first.\n\n" + calls[0],
        "There is nothing to call here.",
        "",
        think + calls[0],
        think + two,
        think + "No call needed.",
        f"\nThe user wants the file.\n{m.think_close}\n\n" + calls[2],  # reasoning pre-opened by the prompt
        calls[0] + "\nDone.",
    ]
    closer = m.block_close
    malformed = [
        f.render_call("delete_everything", {"path": "/"}),  # unknown tool
        f.render_call("grep", {"pattern": "x"}),  # a required argument missing
        f.render_call("read_file", {"path": "a.py", "mode": "r"}),  # an argument the schema does not have
        calls[0][: -len(closer)],  # unclosed block
        calls[0][: len(calls[0]) // 2],  # cut inside the block
        f"Let me call {m.block_open} now.",  # a raw opener in free text
        calls[0] + calls[0],  # two blocks without the separator
    ]
    if f.name == "hermes":
        malformed += [
            f.render_call("read_file", {"path": 1}),  # wrong type
            calls[0].replace('"}}', '"}'),  # broken JSON
            calls[0].replace('{"path": ', '{"path":'),  # not the template's spelling
        ]
    if f.name == "qwen-xml":
        malformed += ["<function=read_file>\n<parameter=path>\na\n</parameter>\n</function>"]  # a bare block
    if turn.options.reasoning == "prefilled":  # the turn starts inside the reasoning: close it first
        malformed = [f"\nLet me see.\n{m.think_close}\n\n{text}" for text in malformed]
    return canonical, malformed


def mutations(texts: list[str], rng: np.random.Generator, n: int) -> list[str]:
    alphabet = [*'<>/="{}:, \n\tabtx_\\é', "<tool_call>", "</tool_call>", "<think>", "</think>", "\n</"]
    out = []
    sources = [t for t in texts if t]
    for _ in range(n):
        text = sources[int(rng.integers(len(sources)))]
        i = int(rng.integers(len(text) + 1))
        op = int(rng.integers(4))
        piece = alphabet[int(rng.integers(len(alphabet)))]
        if op == 0:
            text = text[:i] + piece + text[i:]
        elif op == 1:
            text = text[:i] + text[i + 1 :]
        elif op == 2:
            text = text[:i] + piece + text[i + 1 :]
        else:
            text = text[:i]
        out.append(text)
    return out


def walks(turn: TurnGrammar, starts: list[str], rng: np.random.Generator, n: int) -> list[str]:
    """Accepted turns: a prefix of a canonical turn, then random bytes the automaton allows until it may end."""
    dfa = turn.dfa
    t = dfa.transitions
    out: list[str] = []
    for _ in range(n * 4):
        if len(out) >= n:
            break
        start = starts[int(rng.integers(len(starts)))]
        data = bytearray(start[: int(rng.integers(len(start) + 1))].encode("utf-8"))
        state = dfa.step(dfa.start, bytes(data))
        if state < 0:
            continue
        for _step in range(200):
            end = int(t[state, EOS])
            if end >= 0 and dfa.accepting[end] and (rng.random() < 0.1 or _step > 150):
                break
            options = np.flatnonzero(t[state, :256] >= 0)
            if not len(options):
                break
            # Mostly ASCII: a uniform pick among 256 bytes would be mostly UTF-8 lead bytes.
            ascii_options = options[options < 0x80]
            pool = ascii_options if len(ascii_options) and rng.random() < 0.9 else options
            b = int(pool[int(rng.integers(len(pool)))])
            data.append(b)
            state = int(t[state, b])
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if accepts(turn, text):
            out.append(text)
    return out
