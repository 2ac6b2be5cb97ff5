"""Side by side: the same prompts under the same seeds, sampled freely and through the grammar.

:func:`run_compare` runs every task under every seed twice, once with free sampling and once with
:class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor` in the ``logits_processor`` list, judges every turn
of both with the strict parser (:func:`toolgrammar.turn.parser.parse_turn`) and counts, per error kind, the
errors the free run made that the grammar hid. The constrained run must make **none**: any error
there is a bug in toolgrammar, and it is reported loudly (``Report.constrained_errors``, a red
section in ``report.md``, exit code 1 from the CLI), never hidden.

It also judges what the seed calls the bigger story, the calls that never happen: a call written in
another shape (a fenced JSON block, or bare JSON with ``name``/``arguments`` outside the blocks) is an
*intended call* that cannot run, an error of kind ``other-shape``, and the call inside it is judged
with the same strict checks as a block (:mod:`toolgrammar.evaluate.other_shapes`). *Intended calls* = blocks +
other-shape calls; "errors the grammar hid" covers both. For tasks that name one, it counts how often
each mode's first valid call chose the expected tool (and arguments), and how often its first
intended call named it in any shape.

Policies (the constrained side's; ``CompareConfig``): ``auto`` with steering on by default (at call
points the other shapes' openers are moved onto the block opener: :mod:`toolgrammar.runtime.steering`);
``required``, where the turn is the call, and a named tool: then both sides find what the grammar
forces pre-filled in the assistant turn (``<tool_call>\\n{"name": "``, :func:`assistant_opening`), so
the free side is judged on the calls it was made to start, not on never opening one.

Definitions (the same as the seed's, so the numbers compare)
------------------------------------------------------------
- A *run* is one task under one seed in one mode: a conversation of up to ``turns`` assistant turns.
- A turn with no ``<tool_call>`` block is the final answer and ends the run; so does the turn limit.
  With ``turns > 1`` each block's result goes back as a ``role: "tool"`` message (the chat template
  renders it as a ``<tool_response>`` turn): a valid call's result from the :class:`Sandbox`, a bad
  call's error string otherwise, exactly as the seed harness does.
- A run *made a call* when any of its turns has a block, valid or not.

Seeding and batching
--------------------
All tasks of one seed go through ``generate`` together (``batch_size`` rows at a time, left padding).
One batch cannot give each row its own generator, so the scheme is: before each ``generate`` call,
``torch.manual_seed(seed * 1_000_000 + batch * 1_000 + turn)``, the same in both modes. Outside
blocks the grammar leaves logits bit-identical, so in a given row both modes draw the same tokens
until the grammar first changes that row's distribution; after that they diverge (and from the
second turn on, the two modes' batches may hold different runs). Batches are fixed slices of the task
list, so a resumed run draws exactly what an uninterrupted one would (same machine, same torch). The
KV cache of the prompts' shared start (the system turn listing the tools, about 550 tokens) is
computed once; each row's own part is left-padded after it (``prefix_cache=False`` pads the whole
prompt on the left; the sampled tokens are the same either way, a test checks it).

Tokens per second are generated tokens over the wall time of the ``generate`` calls (prefill
included); the time spent inside the logits processor is measured separately.

Files (``out/``)
----------------
``config.json`` (what was asked, with the tools' fingerprint, the tasks file's SHA-256 and the task ids,
checked by ``resume``);
``runs.jsonl`` (written as results come: one ``batch`` line with timings per generate call, one
``run`` line per task and seed holding both modes); and at the end ``report.json`` (config, summary,
every run with prompt, both raw outputs, parses, error kinds and timings), ``report.md`` and
``chart.png``.

Where each part lives
---------------------
- :mod:`toolgrammar.evaluate.compare.config`: :class:`CompareConfig`, :class:`Task` and :func:`load_tasks`,
  :class:`CompareError`, the defaults, the bundled tools and tasks, and the optional packages a run
  needs (:func:`missing_requirements`, :func:`has_matplotlib`).
- :mod:`toolgrammar.evaluate.compare.generation`: :class:`Generation`, the :class:`Generator` protocol, the
  transformers backend :class:`HFGenerator` (torch and transformers are imported only when it is used),
  and :func:`assistant_opening`.
- :mod:`toolgrammar.evaluate.compare.llamacpp_generation`: the llama.cpp backend (``--backend llama.cpp``);
  :mod:`toolgrammar.evaluate.compare.llama_server`: its third side, llama.cpp's own tool-call grammar
  (``--llama-server``).
- :mod:`toolgrammar.evaluate.compare.judging`: the verdicts on one turn (:func:`judge_turn`,
  :func:`arguments_match`), the intended calls, and a run's counts (:func:`rejudge_run`).
- :mod:`toolgrammar.evaluate.compare.running`: the conversations of both modes, the output directory, resume,
  :func:`prepare` and :func:`run_compare`; :mod:`toolgrammar.evaluate.compare.progress`: its progress bar.
- :mod:`toolgrammar.evaluate.compare.report`: :class:`Report`, :func:`summarize` / :func:`summarize_side`,
  :func:`summary_rows`, ``report.md`` and ``chart.png``.

Every name is importable from :mod:`toolgrammar.evaluate.compare` itself, as before the split.
"""

from __future__ import annotations

from toolgrammar.bundled import bundled_tasks_path, bundled_tools_path
from toolgrammar.evaluate.compare.config import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_NEW_TOKENS,
    LLAMA_SERVER,
    MODES,
    SIDE_LABELS,
    SIDES,
    CompareConfig,
    CompareError,
    Mode,
    Task,
    has_matplotlib,
    load_tasks,
    missing_requirements,
)
from toolgrammar.evaluate.compare.generation import Generation, Generator, HFGenerator, assistant_opening
from toolgrammar.evaluate.compare.judging import arguments_match, judge_turn, rejudge_run
from toolgrammar.evaluate.compare.progress import progress_bar as progress_bar
from toolgrammar.evaluate.compare.report import (
    INTENDED_ERROR_KINDS,
    Report,
    side_headings,
    sides_of,
    summarize,
    summarize_side,
    summary_rows,
    write_chart,
)
from toolgrammar.evaluate.compare.running import initial_messages as initial_messages
from toolgrammar.evaluate.compare.running import prepare, run_compare
from toolgrammar.evaluate.compare.running import run_mode as run_mode

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_MAX_NEW_TOKENS",
    "INTENDED_ERROR_KINDS",
    "LLAMA_SERVER",
    "MODES",
    "SIDES",
    "SIDE_LABELS",
    "CompareConfig",
    "CompareError",
    "Generation",
    "Generator",
    "HFGenerator",
    "Mode",
    "Report",
    "Task",
    "arguments_match",
    "assistant_opening",
    "bundled_tasks_path",
    "bundled_tools_path",
    "has_matplotlib",
    "judge_turn",
    "load_tasks",
    "missing_requirements",
    "prepare",
    "rejudge_run",
    "run_compare",
    "side_headings",
    "sides_of",
    "summarize",
    "summarize_side",
    "summary_rows",
    "write_chart",
]
