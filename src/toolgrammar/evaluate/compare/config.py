"""What a side-by-side run is asked to do: its configuration, its tasks, its defaults, the packages it needs."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from toolgrammar.errors import ToolgrammarError
from toolgrammar.evaluate.extras import MATPLOTLIB, TQDM, Requirement, gguf_requirements, missing, model_requirements
from toolgrammar.evaluate.relevance import RelevanceError, gate_methods

Mode = Literal["free", "constrained", "llama-server"]
MODES: tuple[Mode, Mode] = ("free", "constrained")
"""The two sides every run has."""
LLAMA_SERVER: Mode = "llama-server"
"""The third side of ``--backend llama.cpp --llama-server``: llama.cpp's own tool-call grammar (llama-server)."""
SIDES: tuple[Mode, ...] = (*MODES, LLAMA_SERVER)
"""Every side a run may have, in report order."""
SIDE_LABELS: dict[str, str] = {"free": "free", "constrained": "toolgrammar", LLAMA_SERVER: "llama.cpp's own"}
"""Column headings of the sides where three are shown."""


DEFAULT_LIMIT = 10
"""Tasks in the embedded default run. Sized so that the whole default (first-use model conversion
included) finishes within 15 minutes on 2 CPU cores; see examples/compare-results.md for the timing."""
DEFAULT_MAX_NEW_TOKENS = 160
"""Token budget per turn in the embedded default (the seed used 512: ``--max-new-tokens 512``)."""

STEER_GATES: tuple[str, ...] = ("none", "pmi", "question", "name", "pmi+name")
"""``--steer-gate`` values named in the help: steer every constrained run, or only those a relevance gate
(:mod:`toolgrammar.evaluate.relevance`, by its method) lets through. Any ``+`` combination of the methods is
accepted (every part must say yes)."""

_TASK_KEYS = frozenset({"id", "prompt", "expected_tool", "expected_arguments", "system"})
CONFIG_VERSION = "toolgrammar.compare/1"
BACKENDS = ("transformers", "llama.cpp")
"""What ``--backend`` may name."""


class CompareError(ToolgrammarError, ValueError):
    """Bad input to the side-by-side mode (files, tasks, options); raised before any generation."""


# --------------------------------------------------------------------------------------------------
# Inputs


@dataclass(frozen=True)
class Task:
    """One prompt, with what a good first call would be (when the task says)."""

    id: str
    """Unique name (the line number when the file gives none)."""
    prompt: str
    """The user message."""
    expected_tool: str | None = None
    """The tool a good first call uses; ``None`` when any (or no) call is fine."""
    expected_arguments: dict[str, Any] | None = None
    """Arguments that call must have (a subset: other arguments may be present too)."""
    system: str | None = None
    """An optional system message for this task (before the config's own)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def load_tasks(path: str | os.PathLike[str], tools: Any) -> list[Task]:
    """Read a tasks JSONL file and check it against ``tools`` (a ToolSet).

    Every non-blank line is a JSON object with ``prompt`` (a non-empty string) and optionally ``id``,
    ``expected_tool`` (one of the tools), ``expected_arguments`` (an object whose keys that tool
    declares; needs ``expected_tool``) and ``system``. Errors name the file and line.
    """
    file = Path(path)
    if not file.is_file():
        raise CompareError(f"tasks file {str(file)!r} does not exist (pass --tasks FILE.jsonl)")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    text = file.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{file}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as error:
            raise CompareError(f"{where}: malformed JSON line ({error.msg} at column {error.colno})") from error
        if not isinstance(item, dict):
            raise CompareError(f"{where}: expected a JSON object, got {type(item).__name__}")
        unknown = sorted(set(item) - _TASK_KEYS)
        if unknown:
            raise CompareError(f"{where}: unknown keys {unknown}; allowed: {sorted(_TASK_KEYS)}")
        prompt = item.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise CompareError(f"{where}: 'prompt' must be a non-empty string")
        task_id = item.get("id", f"line-{number}")
        if not isinstance(task_id, str | int) or isinstance(task_id, bool):
            raise CompareError(f"{where}: 'id' must be a string")
        task_id = str(task_id)
        if task_id in seen:
            raise CompareError(f"{where}: duplicate id {task_id!r} (first on line {seen[task_id]})")
        seen[task_id] = number
        tool = item.get("expected_tool")
        if tool is not None and (not isinstance(tool, str) or tool not in tools):
            raise CompareError(
                f"{where}: unknown tool {tool!r} in expected_tool; the tools are {', '.join(tools.names)}"
            )
        arguments = item.get("expected_arguments")
        if arguments is not None:
            if tool is None:
                raise CompareError(f"{where}: expected_arguments needs expected_tool")
            if not isinstance(arguments, dict):
                raise CompareError(f"{where}: expected_arguments must be a JSON object")
            declared = set(tools[tool].parameters.get("properties", {}))
            extra = sorted(set(arguments) - declared)
            if extra:
                raise CompareError(
                    f"{where}: expected_arguments {extra} are not arguments of {tool!r} (it takes {sorted(declared)})"
                )
        system = item.get("system")
        if system is not None and not isinstance(system, str):
            raise CompareError(f"{where}: 'system' must be a string")
        tasks.append(Task(task_id, prompt, tool, arguments, system))
    if not tasks:
        raise CompareError(f"tasks file {str(file)!r} holds no tasks")
    return tasks


# --------------------------------------------------------------------------------------------------
# Configuration


@dataclass
class CompareConfig:
    """Everything :func:`run_compare` needs; the defaults are the embedded default run."""

    model: str = "qwen2.5-coder-0.5b"
    """``--model``: a built-in name, a local directory, or a model id already in the HF cache."""
    tools: str | None = None
    """Tool list (JSON); ``None``: the bundled five seed tools."""
    tasks: str | None = None
    """Tasks (JSONL); ``None``: the bundled tasks."""
    seeds: tuple[int, ...] = (0,)
    """One run per task per seed, in each mode."""
    limit: int | None = DEFAULT_LIMIT
    """Use only the first ``limit`` tasks (after ``skip``); ``None``: all."""
    skip: int = 0
    """Leave out the first ``skip`` tasks (per category with ``--suite bfcl``): a slice held out from tuning."""
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    """Token budget of each assistant turn (the processor gets the same number)."""
    temperature: float = 0.7
    """Sampling temperature; ``0`` is greedy. 0.7 / top-p 0.8 / top-k 20 is Qwen2.5's recommended setting."""
    top_p: float = 0.8
    top_k: int = 20
    turns: int = 1
    """Assistant turns per run (the seed's harness: 8). With 1, calls are judged but never executed."""
    format: str = "hermes"
    """Tool-call format of the grammar and the parser."""
    mode: str = "strings"
    """Argument rule: ``strings`` (the seed harness's: every argument a string) or ``schema``."""
    parse_mode: str = "strict"
    """Parser mode: ``strict`` or ``seed`` (the seed's exact regular expression)."""
    tool_choice: str = "auto"
    """The policy of both sides: ``auto``, ``required`` (the turn is the call), ``none``, or a tool name.
    When it forces a call, both sides get the block opener pre-filled in the assistant turn (see
    :func:`assistant_opening`), so the free side is judged on calls it was made to start."""
    prose_first: bool = False
    """With ``required``: free text may come before the call (the budget forces it at the end)."""
    steer_to_blocks: bool = True
    """Constrained side: move the probability of other call shapes' openers onto the block opener at
    call points (:mod:`toolgrammar.runtime.steering`). The free side is never steered."""
    close_on_stop: bool = True
    """Constrained side: where the model wants to stop inside a block whose call is complete, its stop
    goes to the block's close (:mod:`toolgrammar.runtime.closing`)."""
    prefix_true: bool = False
    """Constrained side: inside a block a masked token whose bytes start with an accepted continuation gives
    its probability to the allowed tokens consistent with it (:mod:`toolgrammar.runtime.prefix_true`)."""
    steer_gate: str = "none"
    """Constrained side, with ``steer_to_blocks``: which runs steering may act on. ``none``: every run;
    ``pmi``: only runs whose last user message the tools' descriptions make more likely (the model's
    own log-probabilities, two batched passes); ``question``: only runs where the model answers "yes"
    to whether one of the tools can do what the request asks (one batched pass); ``name``: only runs
    where the model, calling now, would more likely than not name an offered tool (a pass over the
    prompt and a few cached steps per run); methods joined by ``+`` (``pmi+name``): where all say so.
    See :mod:`toolgrammar.evaluate.relevance`; the gate's score and verdict are recorded per run."""
    parallel_tool_calls: bool = True
    reasoning: str = "disabled"
    """``disabled`` | ``enabled`` | ``prefilled``; also sets the chat template's ``enable_thinking``."""
    whitespace: str = "canonical"
    escape_markers: bool = False
    batch_size: int | None = None
    """Rows per ``generate`` call; ``None``: all tasks of a seed at once."""
    system_prompt: str | None = None
    """A system message for every task; ``None`` keeps the chat template's default."""
    out: str = "toolgrammar-compare"
    """Output directory."""
    resume: bool = False
    """Continue the run in ``out`` (same config) instead of starting over."""
    progress: bool = True
    """Show a progress bar (stderr)."""
    repo: str | None = None
    """Repository the sandbox copies for multi-turn runs; ``None``: the bundled example repository."""
    test_timeout_s: float = 60.0
    """Limit of one ``run_tests`` call in the sandbox."""
    prefix_cache: bool = True
    """Compute the KV cache of the prompts' shared start (the system turn with the tools) once."""
    backend: str = "transformers"
    """What runs the model: ``transformers`` (``model.generate``, batched) or ``llama.cpp`` (llama-cpp-python on
    the model's GGUF, one prompt at a time; :mod:`toolgrammar.evaluate.compare.llamacpp_generation`)."""
    llama_server: bool = False
    """With ``backend="llama.cpp"``: a third side, the same conversations through llama.cpp's own tool-call
    grammar (llama-server ``--jinja`` with the request's tools; :mod:`toolgrammar.evaluate.compare.llama_server`),
    judged by the same strict parser."""

    def sides(self) -> tuple[Mode, ...]:
        """The sides this run has: free and constrained, and llama-server's when asked."""
        return SIDES if self.llama_server else MODES

    def grammar_options(self) -> dict[str, Any]:
        """The keyword options of :class:`~toolgrammar.integrations.hf.ToolCallLogitsProcessor`."""
        return {
            "format": self.format,
            "tool_choice": self.tool_choice,
            "parallel_tool_calls": self.parallel_tool_calls,
            "reasoning": self.reasoning,
            "whitespace": self.whitespace,
            "escape_markers": self.escape_markers,
            "prose_first": self.prose_first,
        }

    def check(self) -> None:
        """Raise :class:`CompareError` on options that make no sense (before anything is loaded)."""
        if not self.seeds:
            raise CompareError("at least one seed is needed")
        if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in self.seeds):
            raise CompareError(f"seeds must be non-negative integers, got {list(self.seeds)}")
        if len(set(self.seeds)) != len(self.seeds):
            raise CompareError(f"seeds repeat: {list(self.seeds)}")
        if self.limit is not None and self.limit < 1:
            raise CompareError(f"--limit must be at least 1, got {self.limit}")
        if self.skip < 0:
            raise CompareError(f"--skip must be 0 or more, got {self.skip}")
        if self.max_new_tokens < 1:
            raise CompareError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if self.turns < 1:
            raise CompareError(f"--turns must be at least 1, got {self.turns}")
        if self.temperature < 0:
            raise CompareError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise CompareError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.batch_size is not None and self.batch_size < 1:
            raise CompareError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.mode not in ("schema", "strings"):
            raise CompareError(f"--mode must be 'schema' or 'strings', got {self.mode!r}")
        if self.parse_mode not in ("strict", "seed"):
            raise CompareError(f"--parse-mode must be 'strict' or 'seed', got {self.parse_mode!r}")
        if self.reasoning not in ("disabled", "enabled", "prefilled"):
            raise CompareError(f"--reasoning must be disabled, enabled or prefilled, got {self.reasoning!r}")
        if self.steer_gate != "none":
            try:
                gate_methods(self.steer_gate)
            except RelevanceError as exc:
                raise CompareError(
                    f"--steer-gate must be one of {', '.join(STEER_GATES)} (or methods joined by '+'), "
                    f"got {self.steer_gate!r}"
                ) from exc
        if self.steer_gate != "none" and not self.steer_to_blocks:
            raise CompareError(
                f"--steer-gate {self.steer_gate} selects the runs steering acts on: it needs --steer-to-blocks"
            )
        if self.backend not in BACKENDS:
            raise CompareError(f"--backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.backend == "llama.cpp" and self.steer_gate not in ("none", "name"):
            raise CompareError(
                f"--steer-gate {self.steer_gate}: with --backend llama.cpp the gate is 'name' (or none); pmi and "
                "question run on transformers only"
            )
        if self.llama_server and self.backend != "llama.cpp":
            raise CompareError("--llama-server runs llama.cpp's own grammar: it needs --backend llama.cpp")
        if self.llama_server and self.turns != 1:
            raise CompareError(
                f"--llama-server judges one assistant turn (--turns 1, got {self.turns}): llama-server takes earlier "
                "calls back as structured tool_calls, which the other sides' raw turns are not"
            )
        if self.llama_server and (self.prose_first or self.reasoning == "prefilled"):
            raise CompareError(
                "--llama-server: llama.cpp's own grammar has no --prose-first or --reasoning prefilled; leave them out"
            )
        if self.prose_first and self.tool_choice != "required":
            raise CompareError(f"--prose-first applies to --tool-choice required only, got {self.tool_choice!r}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["seeds"] = list(self.seeds)
        return data


# --------------------------------------------------------------------------------------------------
# Optional packages


def has_matplotlib() -> bool:
    """Whether the chart can be drawn (matplotlib comes with the ``compare`` extra)."""
    return MATPLOTLIB.installed()


def missing_requirements(config: CompareConfig) -> tuple[list[Requirement], list[Requirement]]:
    """The optional packages a run of ``config`` lacks, found without importing them: ``(needed, nice)``.

    ``needed``: without them the run cannot start (torch and transformers; what ``--model`` loads, see
    :func:`toolgrammar.evaluate.extras.model_requirements`). ``nice``: the run goes on without them, but with
    less (matplotlib: no chart.png; tqdm: no progress bar).
    """
    if config.backend == "llama.cpp":
        needed = missing(gguf_requirements(config.model))
    else:
        needed = missing(model_requirements(config.model))
    nice = missing([MATPLOTLIB, *([TQDM] if config.progress else [])])
    return needed, nice
