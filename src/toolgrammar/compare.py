"""Side by side: the same prompts under the same seeds, sampled freely and through the grammar.

:func:`run_compare` runs every task under every seed twice, once with free sampling and once with
:class:`~toolgrammar.hf.ToolCallLogitsProcessor` in the ``logits_processor`` list, judges every turn
of both with the strict parser (:func:`toolgrammar.parser.parse_turn`) and counts, per error kind, the
errors the free run made that the grammar hid. The constrained run must make **none**: any error
there is a bug in toolgrammar, and it is reported loudly (``Report.constrained_errors``, a red
section in ``report.md``, exit code 1 from the CLI), never hidden.

It also judges what the seed calls the bigger story, the calls that never happen: a call written in
another shape (a fenced JSON block, or bare JSON with ``name``/``arguments`` outside the blocks) is an
*intended call* that cannot run, an error of kind ``other-shape``, and the call inside it is judged
with the same strict checks as a block (:mod:`toolgrammar.other_shapes`). *Intended calls* = blocks +
other-shape calls; "errors the grammar hid" covers both. For tasks that name one, it counts how often
each mode's first valid call chose the expected tool (and arguments), and how often its first
intended call named it in any shape.

Policies (the constrained side's; ``CompareConfig``): ``auto`` with steering on by default (at call
points the other shapes' openers are moved onto the block opener: :mod:`toolgrammar.steering`);
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
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import inspect
import json
import os
import platform
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from .errors import ToolgrammarError
from .extras import MATPLOTLIB, TQDM, Requirement, missing, missing_message, model_requirements
from .other_shapes import OTHER_SHAPE_KIND, find_other_shape_calls
from .sandbox import Sandbox
from .turn import ERROR_KINDS, TurnParse

__all__ = [
    "MODES",
    "CompareConfig",
    "CompareError",
    "Generation",
    "HFGenerator",
    "Report",
    "Task",
    "assistant_opening",
    "bundled_tasks_path",
    "bundled_tools_path",
    "load_tasks",
    "missing_requirements",
    "run_compare",
]

Mode = Literal["free", "constrained"]
MODES: tuple[Mode, Mode] = ("free", "constrained")

DEFAULT_LIMIT = 10
"""Tasks in the embedded default run. Sized so that the whole default (first-use model conversion
included) finishes within 15 minutes on 2 CPU cores; see examples/compare-results.md for the timing."""
DEFAULT_MAX_NEW_TOKENS = 160
"""Token budget per turn in the embedded default (the seed used 512: ``--max-new-tokens 512``)."""

_TASK_KEYS = frozenset({"id", "prompt", "expected_tool", "expected_arguments", "system"})
_CONFIG_VERSION = "toolgrammar.compare/1"


class CompareError(ToolgrammarError, ValueError):
    """Bad input to the side-by-side mode (files, tasks, options); raised before any generation."""


# --------------------------------------------------------------------------------------------------
# Inputs


def bundled_tools_path() -> Path:
    """The five seed tools (``read_file``, ``list_files``, ``grep``, ``write_file``, ``run_tests``)."""
    return Path(str(resources.files("toolgrammar") / "data" / "tools.json"))


def bundled_tasks_path() -> Path:
    """The bundled coding-agent tasks over the example repository (44 of them)."""
    return Path(str(resources.files("toolgrammar") / "data" / "tasks.jsonl"))


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
    """Use only the first ``limit`` tasks; ``None``: all."""
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
    call points (:mod:`toolgrammar.steering`). The free side is never steered."""
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

    def grammar_options(self) -> dict[str, Any]:
        """The keyword options of :class:`~toolgrammar.hf.ToolCallLogitsProcessor`."""
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
        if self.prose_first and self.tool_choice != "required":
            raise CompareError(f"--prose-first applies to --tool-choice required only, got {self.tool_choice!r}")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["seeds"] = list(self.seeds)
        return data


# --------------------------------------------------------------------------------------------------
# Generation backends


@dataclass
class Generation:
    """One row of one ``generate`` call."""

    text: str
    """The assistant turn as text (end-of-turn token and padding removed)."""
    tokens: int
    """Tokens generated for this row (its end-of-turn token included)."""
    finish: Literal["stop", "length"]
    """``stop``: the model ended the turn; ``length``: it hit ``max_new_tokens``."""
    processor_error: str | None = None
    """Constrained rows: why the row left the grammar, when it did (always a bug)."""


class Generator(Protocol):
    """What :func:`run_compare` drives; :class:`HFGenerator` is the real one, tests may pass their own."""

    name: str
    source: str

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt text of a conversation (chat template, generation prompt added)."""
        ...

    def generate(
        self, prompts: list[str], *, constrained: bool, seed: int, on_step: Callable[[int], None] | None = None
    ) -> list[Generation]:
        """Generate one turn for every prompt, seeding the sampler with ``seed`` first."""
        ...


class HFGenerator:
    """A transformers model + tokenizer, free or through :class:`~toolgrammar.hf.ToolCallLogitsProcessor`.

    The processor is built once (its grammar compiled once) and ``reset()`` before every ``generate``.
    Rows are left-padded by hand (the shared tokenizer object is never mutated). The time spent inside
    the processor is measured, so the report can show the grammar's share of the cost.
    """

    def __init__(self, loaded: Any, tools: Any, config: CompareConfig):
        import torch

        self.torch = torch
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.name = loaded.name
        self.source = loaded.source
        self.tools = tools
        self.config = config
        tok = self.tokenizer
        ids = {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        if tok.eos_token_id is not None:
            ids.add(tok.eos_token_id)
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
        unk = getattr(tok, "unk_token_id", None)
        self.eos_ids = sorted(i for i in ids if isinstance(i, int) and i >= 0 and i != unk)
        if not self.eos_ids:
            raise CompareError(f"model {self.name!r}: its tokenizer has no end-of-turn token")
        pad = tok.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self._processor: Any = None
        self._prefix_key: tuple[int, ...] | None = None
        self._prefix_value: Any = None
        self.processor_seconds = 0.0

    def prepare(self) -> None:
        """Build the processor now (compiling the grammar), so bad options fail before any generation."""
        _ = self.processor

    @property
    def processor(self) -> Any:
        if self._processor is None:
            from .hf import ToolCallLogitsProcessor

            self._processor = ToolCallLogitsProcessor(
                self.tokenizer,
                self.tools,
                max_new_tokens=self.config.max_new_tokens,
                mode=self.config.mode,
                steer_to_blocks=self.config.steer_to_blocks,
                assistant_prefix=assistant_opening(self.config, self.tools),
                **self.config.grammar_options(),
            )
        return self._processor

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=self.config.reasoning != "disabled",
        )

    def _prefix_cache(self, prefix: list[int]) -> Any:
        """The KV cache of ``prefix`` (batch 1), computed once per distinct prefix and kept."""
        key = tuple(prefix)
        if self._prefix_key != key:
            torch = self.torch
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([prefix], dtype=torch.long), use_cache=True)
            self._prefix_key = key
            self._prefix_value = getattr(out, "cache", None) or out.past_key_values
        return self._prefix_value

    def generate(
        self, prompts: list[str], *, constrained: bool, seed: int, on_step: Callable[[int], None] | None = None
    ) -> list[Generation]:
        torch = self.torch
        from transformers import LogitsProcessor, LogitsProcessorList

        encoded = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        width = max(len(e) for e in encoded)
        # The prompts share the chat template's system turn (the tool list: about 550 tokens). Its KV
        # cache is computed once and every row starts from it; each row's own suffix is left-padded
        # *after* the shared prefix. Position ids come from the attention mask's cumulative sum, so
        # the padding in the middle changes nothing but the work saved (prefill was a third of the
        # default run's time on 2 cores).
        shared = 0
        if self.config.prefix_cache and len(encoded) > 0:
            shortest = min(len(e) for e in encoded)
            first = encoded[0]
            while shared < shortest - 1 and all(e[shared] == first[shared] for e in encoded):
                shared += 1
            if shared < 64:
                shared = 0
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, :shared] = torch.tensor(ids[:shared], dtype=torch.long)
            attention[row, :shared] = 1
            input_ids[row, width - len(ids) + shared :] = torch.tensor(ids[shared:], dtype=torch.long)
            attention[row, width - len(ids) + shared :] = 1
        extra: dict[str, Any] = {}
        if shared:
            cache = copy.deepcopy(self._prefix_cache(encoded[0][:shared]))
            cache.batch_repeat_interleave(len(encoded))
            # transformers 5 calls the keyword ``cache``; 4.x called it ``past_key_values``
            forward = inspect.signature(self.model.forward).parameters
            extra["cache" if "cache" in forward else "past_key_values"] = cache

        generator = self

        class _Timed(LogitsProcessor):  # times the grammar and ticks the progress display
            def __init__(self, inner: Any):
                self.inner = inner
                self.step = 0

            def __call__(self, ids: Any, scores: Any) -> Any:
                self.step += 1
                if on_step is not None:
                    on_step(self.step)
                if self.inner is None:
                    return scores
                started = time.perf_counter()
                scores = self.inner(ids, scores)
                generator.processor_seconds += time.perf_counter() - started
                return scores

        inner = None
        if constrained:
            inner = self.processor
            inner.reset()
        sampling: dict[str, Any] = {"do_sample": False}
        if self.config.temperature > 0:
            sampling = {
                "do_sample": True,
                "temperature": self.config.temperature,
                "top_p": self.config.top_p,
                "top_k": self.config.top_k,
            }
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=self.config.max_new_tokens,
                logits_processor=LogitsProcessorList([_Timed(inner)]),
                pad_token_id=self.pad_id,
                eos_token_id=self.eos_ids,
                **sampling,
                **extra,
            )
        new = out[:, width:].tolist()
        errors = list(inner.errors) if inner is not None else [None] * len(new)
        eos = set(self.eos_ids)
        results = []
        for row, ids in enumerate(new):
            end = next((i for i, t in enumerate(ids) if t in eos), None)
            kept = ids if end is None else ids[:end]
            text = self.tokenizer.decode(kept, skip_special_tokens=False)
            results.append(
                Generation(
                    text=text,
                    tokens=len(kept) + (end is not None),
                    finish="length" if end is None else "stop",
                    processor_error=errors[row] if row < len(errors) else None,
                )
            )
        return results


# --------------------------------------------------------------------------------------------------
# Judging one turn


def assistant_opening(config: CompareConfig, tools: Any) -> str:
    """What both sides find pre-filled in every assistant turn: what the grammar forces, when it forces a call.

    A policy that makes the turn the call (``required`` call-first, a named tool) forces the opening of
    the block, token by token, up to where the tools' names diverge (hermes: ``<tool_call>\\n{"name": "``,
    :meth:`~toolgrammar.grammar.TurnGrammar.forced_text`). A harness that forces a call pre-fills the
    same. The free side gets it too, so it is judged on the calls it was made to start (its own errors
    inside blocks), not on never opening one; the constrained side's processor continues after it.
    Empty for ``auto``, ``none``, ``prose_first`` and when reasoning may come first.
    """
    if config.tool_choice in ("auto", "none") or config.prose_first or config.reasoning != "disabled":
        return ""
    from .formats import get_format
    from .grammar import compile_turn

    forced = compile_turn(tools, **config.grammar_options()).forced_text()
    return forced if forced.startswith(get_format(config.format).markers.block_open) else ""


def _norm_argument(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip()
        while text.startswith("./"):
            text = text[2:]
        return text.rstrip("/") or text
    return value


def arguments_match(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Every expected argument present with the same value (paths compared without ``./`` or a trailing ``/``)."""
    return all(k in actual and _norm_argument(actual[k]) == _norm_argument(v) for k, v in expected.items())


# --------------------------------------------------------------------------------------------------
# Running


@dataclass
class _Conversation:
    task: Task
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    sandbox: Sandbox | None = None


def _parse(text: str, tools: Any, config: CompareConfig) -> TurnParse:
    from .parser import parse_turn

    return parse_turn(
        text, tools, format=config.format, mode=config.parse_mode, reasoning_started=config.reasoning == "prefilled"
    )


def _inside_unclosed(text: str, parse: TurnParse, tools: Any, config: CompareConfig) -> dict[str, Any] | None:
    """The verdict on the call inside a turn's last block when the turn ended before closing it.

    Such a block is ``truncated``, and that is its error; what the model wrote inside it (an unknown
    tool, an invented argument...) is judged too, by parsing the turn once more with the format's
    closer appended. ``None`` when the turn has no unclosed block; else ``{"kind": KIND | None,
    "call": {"name", "arguments"} | None}`` (``kind`` ``None``: the call inside would be valid).
    """
    if not parse.blocks or parse.blocks[-1].closed:
        return None
    from .formats import get_format

    closer = get_format(config.format).markers.block_close
    closed = _parse(text.rstrip("\n") + "\n" + closer, tools, config)
    if len(closed.blocks) != len(parse.blocks) or not closed.blocks[-1].closed:
        return {"kind": "truncated", "call": None}
    block = closed.blocks[-1]
    return {
        "kind": block.error.kind if block.error else None,
        "call": block.call.to_dict() if block.call else None,
    }


def _initial_messages(task: Task, config: CompareConfig) -> list[dict[str, Any]]:
    own = getattr(task, "messages", None)  # a task that brings its conversation (toolgrammar.bfcl_suite.BfclTask)
    if own:
        given = [dict(m) for m in own]
        if config.system_prompt and given[0].get("role") == "system":
            given[0]["content"] = f"{config.system_prompt}\n\n{given[0]['content']}"
        elif config.system_prompt:
            given.insert(0, {"role": "system", "content": config.system_prompt})
        return given
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(s for s in (config.system_prompt, task.system) if s)
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": task.prompt})
    return messages


def _run_mode(
    generator: Generator,
    batch: list[Task],
    *,
    mode: Mode,
    seed: int,
    batch_index: int,
    tools: Any,
    config: CompareConfig,
    on_step: Callable[[str, int], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """All turns of every run of one batch in one mode; returns (run records, timing records)."""
    openai_tools = tools.to_openai()
    opening = assistant_opening(config, tools)
    conversations = [_Conversation(task, _initial_messages(task, config)) for task in batch]
    timings: list[dict[str, Any]] = []
    try:
        for turn in range(config.turns):
            active = [c for c in conversations if c.stop is None]
            if not active:
                break
            prompts = [generator.render(c.messages, openai_tools) + opening for c in active]
            turn_seed = seed * 1_000_000 + batch_index * 1_000 + turn
            grammar_before = getattr(generator, "processor_seconds", 0.0)
            started = time.perf_counter()
            outputs = generator.generate(
                prompts,
                constrained=mode == "constrained",
                seed=turn_seed,
                on_step=lambda step, turn=turn: on_step(f"{mode} turn {turn + 1}", step),
            )
            seconds = time.perf_counter() - started
            grammar_seconds = getattr(generator, "processor_seconds", 0.0) - grammar_before
            if len(outputs) != len(active):
                raise CompareError(f"the generator returned {len(outputs)} rows for {len(active)} prompts")
            tokens = sum(o.tokens for o in outputs)
            timings.append(
                {
                    "type": "batch",
                    "seed": seed,
                    "batch": batch_index,
                    "mode": mode,
                    "turn": turn,
                    "rows": len(active),
                    "tokens": tokens,
                    "seconds": seconds,
                    "processor_seconds": grammar_seconds,
                    "torch_seed": turn_seed,
                }
            )
            for conversation, prompt, output in zip(active, prompts, outputs, strict=True):
                text = opening + output.text  # the whole assistant turn, pre-filled opening included
                parse, judged = _judged(text, tools, config)
                record = {
                    "turn": turn,
                    "prompt_chars": len(prompt),
                    "opening": opening,
                    "text": text,
                    "tokens": output.tokens,
                    "finish": output.finish,
                    "batch_seconds": seconds,
                    **judged,
                    "processor_error": output.processor_error,
                }
                conversation.turns.append(record)
                if not parse.blocks:
                    conversation.stop = "no-call"
                    continue
                if turn == config.turns - 1:
                    conversation.stop = "turn-limit"
                    continue
                results = []
                for block in parse.blocks:
                    if block.call is not None:
                        if conversation.sandbox is None:
                            conversation.sandbox = Sandbox(config.repo, test_timeout_s=config.test_timeout_s)
                        results.append(conversation.sandbox.execute(block.call.name, block.call.arguments))
                    else:
                        results.append(block.error.message if block.error else "error: invalid tool call")
                record["tool_results"] = results
                conversation.messages.append({"role": "assistant", "content": text})
                conversation.messages.extend({"role": "tool", "content": r} for r in results)
    finally:
        for conversation in conversations:
            if conversation.sandbox is not None:
                conversation.sandbox.close()
    return [_summarize_run(c) for c in conversations], timings


def judge_turn(text: str, tools: Any, config: CompareConfig) -> dict[str, Any]:
    """The verdicts on one assistant turn's text: its parse, its other-shape calls, its unclosed block."""
    return _judged(text, tools, config)[1]


def _judged(text: str, tools: Any, config: CompareConfig) -> tuple[TurnParse, dict[str, Any]]:
    parse = _parse(text, tools, config)
    return parse, {
        "parse": parse.to_dict(),
        "error_kinds": [e.kind for e in parse.errors],
        "errors": [e.message for e in parse.errors],
        "other_shape_calls": [c.to_dict() for c in find_other_shape_calls(parse.content, tools)],
        "inside_unclosed": _inside_unclosed(text, parse, tools, config),
    }


def rejudge_run(record: Mapping[str, Any], task: Task, tools: Any, config: CompareConfig) -> dict[str, Any]:
    """A run record judged again from its turns' texts by the current judge (older reports, benches)."""
    turns = [{**t, **judge_turn(t["text"], tools, config)} for t in record["turns"]]
    return _summarize_run(_Conversation(task, [], turns, stop=record["stop"]))


def _intended_calls(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls one turn meant to make, in order: its blocks and its calls in other shapes.

    Each is ``{"name", "arguments", "valid", "shape"}``; ``arguments`` is ``None`` when the call
    could not be read, ``valid`` says whether it ran (a valid block). Blocks sit at their offset in
    the turn, other shapes at theirs in the content (the turn less its markup), close enough to order
    the two.
    """
    calls = []
    inside = turn.get("inside_unclosed") or {}
    for block in turn["parse"]["blocks"]:
        call = block["call"]
        name = call["name"] if call else _block_name(block["raw"])
        arguments = call["arguments"] if call else None
        if not block["closed"] and inside.get("call"):
            arguments = inside["call"]["arguments"]  # cut before its closer, but its arguments can be read
        calls.append(
            (block["start"], {"name": name, "arguments": arguments, "valid": call is not None, "shape": "block"})
        )
    for other in turn["other_shape_calls"]:
        arguments = other["call"]["arguments"] if other["call"] else None
        calls.append(
            (other["start"], {"name": other["name"], "arguments": arguments, "valid": False, "shape": other["shape"]})
        )
    return [c for _, c in sorted(calls, key=lambda item: item[0])]


def _block_name(raw: str) -> str | None:
    """The tool name an invalid block gives, when it gives one ("name" in JSON, ``<function=`` in XML)."""
    for pattern in (r'"name"\s*:\s*"([^"\\\n]*)"', r"<function=([^>\n]*)>"):
        match = re.search(pattern, raw)
        if match:
            return match.group(1)
    return None


def _summarize_run(conversation: _Conversation) -> dict[str, Any]:
    task = conversation.task
    turns = conversation.turns
    blocks = sum(len(t["parse"]["blocks"]) for t in turns)
    kinds = Counter(k for t in turns for k in t["error_kinds"])
    calls = [c for t in turns for c in t["parse"]["tool_calls"]]
    first = calls[0] if calls else None
    intended = [c for t in turns for c in _intended_calls(t)]
    first_intended = intended[0] if intended else None
    expected_tool, expected_arguments = task.expected_tool, task.expected_arguments

    def named(call: Mapping[str, Any] | None) -> bool:
        return bool(call and call["name"] == expected_tool)

    def with_arguments(call: Mapping[str, Any] | None) -> bool:
        return bool(
            named(call)
            and call is not None
            and isinstance(call.get("arguments"), dict)
            and arguments_match(expected_arguments or {}, call["arguments"])
        )

    has_tool, has_arguments = expected_tool is not None, expected_arguments is not None
    others = [c for t in turns for c in t["other_shape_calls"]]
    return {
        "turns": turns,
        "n_turns": len(turns),
        "stop": conversation.stop or "turn-limit",
        "blocks": blocks,
        "valid_calls": len(calls),
        "error_kinds": dict(kinds),
        "made_call": blocks > 0,
        "other_shape_calls": others,
        "other_shape_inner_kinds": dict(Counter(c["error"]["kind"] for c in others if c["error"])),
        "unclosed_inner_kinds": dict(
            Counter(
                t["inside_unclosed"]["kind"] or "valid"
                for t in turns
                if t.get("inside_unclosed") and t["inside_unclosed"]["kind"] != "truncated"
            )
        ),
        "intended_calls": len(intended),
        "first_call": first,
        "first_intended_call": first_intended,
        "expected_tool_hit": named(first) if has_tool else None,
        "expected_arguments_hit": with_arguments(first) if has_arguments else None,
        "expected_tool_any_shape_hit": named(first_intended) if has_tool else None,
        "expected_arguments_any_shape_hit": with_arguments(first_intended) if has_arguments else None,
        "tokens": sum(t["tokens"] for t in turns),
        "truncated_turns": sum(t["finish"] == "length" for t in turns),
        "processor_errors": [t["processor_error"] for t in turns if t["processor_error"]],
    }


# --------------------------------------------------------------------------------------------------
# Summary and report


@dataclass
class Report:
    """The outcome of :func:`run_compare`: a summary per mode and every run."""

    config: dict[str, Any]
    summary: dict[str, Any]
    runs: list[dict[str, Any]]
    out: Path
    environment: dict[str, Any] = field(default_factory=dict)
    batches: list[dict[str, Any]] = field(default_factory=list)
    """One timing record per ``generate`` call (mode, turn, rows, tokens, seconds, processor seconds)."""

    @property
    def constrained_errors(self) -> int:
        """Errors in the constrained run (blocks with errors plus rows that left the grammar). Must be 0."""
        c = self.summary["modes"]["constrained"]
        return c["errors"] + c["processor_errors"]

    @property
    def ok(self) -> bool:
        return self.constrained_errors == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": _CONFIG_VERSION,
            "config": self.config,
            "environment": self.environment,
            "summary": self.summary,
            "batches": self.batches,
            "runs": self.runs,
        }


INTENDED_ERROR_KINDS: tuple[str, ...] = (*ERROR_KINDS, OTHER_SHAPE_KIND)
"""Every way an intended call fails to run: a block's error kinds, and a call written in another shape."""


def summarize_side(
    records: Sequence[Mapping[str, Any]], timings: Sequence[Mapping[str, Any]], tool_names: Iterable[str] = ()
) -> dict[str, Any]:
    """The counts of one side (the free or the constrained run records of :func:`summarize`; a policy in a bench).

    ``tool_names``: the offered tools, to count how many other-shape calls name one of them (a 0.5B
    model also writes ``{"name": "median", "arguments": ...}`` for functions of the repository).
    """
    known = set(tool_names)
    kinds: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    unclosed: Counter[str] = Counter()
    for r in records:
        kinds.update(r["error_kinds"])
        inner.update(r.get("other_shape_inner_kinds", {}))
        unclosed.update(r.get("unclosed_inner_kinds", {}))
    others = [c for r in records for c in r["other_shape_calls"]]
    shapes = Counter(c["shape"] for c in others)
    intended_kinds = Counter(kinds)
    intended_kinds[OTHER_SHAPE_KIND] = len(others)

    def hits(key: str) -> tuple[int, int, float | None]:
        values = [r[key] for r in records if r.get(key) is not None]
        return len(values), sum(values), (sum(values) / len(values) if values else None)

    tool_n, tool_hits, tool_rate = hits("expected_tool_hit")
    arg_n, arg_hits, arg_rate = hits("expected_arguments_hit")
    _, tool_any, tool_any_rate = hits("expected_tool_any_shape_hit")
    _, arg_any, arg_any_rate = hits("expected_arguments_any_shape_hit")
    seconds = sum(t["seconds"] for t in timings)
    tokens = sum(t["tokens"] for t in timings)
    blocks = sum(r["blocks"] for r in records)
    valid = sum(r["valid_calls"] for r in records)
    return {
        "runs": len(records),
        "turns": sum(r["n_turns"] for r in records),
        "runs_with_call": sum(r["made_call"] for r in records),
        "runs_without_call": sum(not r["made_call"] for r in records),
        "runs_with_valid_call": sum(r["valid_calls"] > 0 for r in records),
        "runs_with_intended_call": sum(r.get("intended_calls", 0) > 0 for r in records),
        "runs_at_turn_limit": sum(r["stop"] == "turn-limit" for r in records),
        "intended_calls": blocks + len(others),
        "blocks": blocks,
        "valid_calls": valid,
        "valid_rate": valid / blocks if blocks else None,
        "errors": sum(kinds.values()),
        "error_kinds": {k: kinds[k] for k in ERROR_KINDS if kinds[k]},
        "intended_errors": sum(intended_kinds.values()),
        "intended_error_kinds": {k: intended_kinds[k] for k in INTENDED_ERROR_KINDS if intended_kinds[k]},
        "processor_errors": sum(len(r["processor_errors"]) for r in records),
        "other_shape_calls": {"fenced": shapes["fenced"], "bare": shapes["bare"]},
        "other_shape_inner_kinds": {k: inner[k] for k in ERROR_KINDS if inner[k]},
        "other_shape_valid_inside": sum(c["error"] is None for c in others),
        "unclosed_inner_kinds": {k: unclosed[k] for k in ERROR_KINDS if unclosed[k]},
        "unclosed_valid_inside": unclosed["valid"],
        "other_shape_calls_known_tool": sum(c["name"] in known for c in others),
        "runs_with_other_shape_call": sum(bool(r["other_shape_calls"]) for r in records),
        "expected_tool_tasks": tool_n,
        "expected_tool_hits": tool_hits,
        "expected_tool_rate": tool_rate,
        "expected_tool_any_shape_hits": tool_any,
        "expected_tool_any_shape_rate": tool_any_rate,
        "expected_arguments_tasks": arg_n,
        "expected_arguments_hits": arg_hits,
        "expected_arguments_rate": arg_rate,
        "expected_arguments_any_shape_hits": arg_any,
        "expected_arguments_any_shape_rate": arg_any_rate,
        "tokens": tokens,
        "truncated_turns": sum(r["truncated_turns"] for r in records),
        "generate_seconds": seconds,
        "processor_seconds": sum(t.get("processor_seconds", 0.0) for t in timings),
        "tokens_per_second": tokens / seconds if seconds > 0 else None,
    }


def summarize(
    runs: Sequence[Mapping[str, Any]], timings: Sequence[Mapping[str, Any]], tool_names: Iterable[str] = ()
) -> dict[str, Any]:
    """Per-mode counts (the report's tables) from run and timing records, and what the grammar hid.

    ``hidden_by_grammar``: per kind of intended-call error (a block's kinds, and ``other-shape`` for a
    call written outside the blocks), the free run's count less the constrained run's;
    ``errors_hidden`` is their sum: the intended calls that failed free and not under the grammar.
    """
    names = list(tool_names)
    modes = {
        mode: summarize_side([r[mode] for r in runs], [t for t in timings if t["mode"] == mode], names)
        for mode in MODES
    }
    free, constrained = modes["free"]["intended_error_kinds"], modes["constrained"]["intended_error_kinds"]
    hidden = {
        k: free.get(k, 0) - constrained.get(k, 0)
        for k in INTENDED_ERROR_KINDS
        if free.get(k, 0) or constrained.get(k, 0)
    }
    return {
        "modes": modes,
        "hidden_by_grammar": hidden,
        "errors_hidden": modes["free"]["intended_errors"] - modes["constrained"]["intended_errors"],
        "runs": len(runs),
    }


def _pct(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "n/a"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _hits(mode: Mapping[str, Any], hits: str, rate: str) -> str:
    return f"{mode[hits]} ({_rate(mode[rate])})"


def summary_rows(summary: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(metric, free, constrained)`` rows shared by the terminal table and report.md."""
    f, c = summary["modes"]["free"], summary["modes"]["constrained"]

    def both(key: str, fmt: Callable[[Any], str] = str) -> tuple[str, str]:
        return fmt(f[key]), fmt(c[key])

    def tps(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    def pair(hits: str, rate: str) -> tuple[str, str]:
        return _hits(f, hits, rate), _hits(c, hits, rate)

    rows = [
        ("runs", *both("runs")),
        ("runs with an intended call (a block or another shape)", *both("runs_with_intended_call")),
        ("runs with a valid call", *both("runs_with_valid_call")),
        ("intended calls (blocks + other shapes)", *both("intended_calls")),
        ("  valid calls (valid blocks)", *both("valid_calls")),
        ("  errors: calls that cannot run", *both("intended_errors")),
    ]
    kinds = [k for k in INTENDED_ERROR_KINDS if f["intended_error_kinds"].get(k) or c["intended_error_kinds"].get(k)]
    for k in kinds:
        label = "other-shape (fenced or bare JSON)" if k == OTHER_SHAPE_KIND else f"{k} (in a block)"
        rows.append(
            (f"    {label}", str(f["intended_error_kinds"].get(k, 0)), str(c["intended_error_kinds"].get(k, 0)))
        )
    inner = [k for k in ERROR_KINDS if f["other_shape_inner_kinds"].get(k) or c["other_shape_inner_kinds"].get(k)]
    if (
        f["other_shape_calls"]["fenced"]
        + f["other_shape_calls"]["bare"]
        + c["other_shape_calls"]["fenced"]
        + c["other_shape_calls"]["bare"]
    ):
        rows += [
            (
                "  other shapes: fenced / bare",
                *(f"{m['other_shape_calls']['fenced']} / {m['other_shape_calls']['bare']}" for m in (f, c)),
            ),
            ("    naming an offered tool", *both("other_shape_calls_known_tool")),
            ("    the call inside would be valid", *both("other_shape_valid_inside")),
        ]
        rows += [
            (
                f"    inside: {k}",
                str(f["other_shape_inner_kinds"].get(k, 0)),
                str(c["other_shape_inner_kinds"].get(k, 0)),
            )
            for k in inner
        ]
    unclosed = [k for k in ERROR_KINDS if f["unclosed_inner_kinds"].get(k) or c["unclosed_inner_kinds"].get(k)]
    if unclosed or f["unclosed_valid_inside"] or c["unclosed_valid_inside"]:
        rows.append(("  truncated blocks: the call inside would be valid", *both("unclosed_valid_inside")))
        rows += [
            (
                f"  truncated blocks, inside: {k}",
                str(f["unclosed_inner_kinds"].get(k, 0)),
                str(c["unclosed_inner_kinds"].get(k, 0)),
            )
            for k in unclosed
        ]
    rows += [
        ("tool-call blocks", *both("blocks")),
        ("invalid blocks (constrained: must be 0)", *both("errors")),
        ("rows that left the grammar", *both("processor_errors")),
        (
            f"expected tool, valid call (of {f['expected_tool_tasks']} runs)",
            *pair("expected_tool_hits", "expected_tool_rate"),
        ),
        ("expected tool, named in any shape", *pair("expected_tool_any_shape_hits", "expected_tool_any_shape_rate")),
        (
            f"expected tool + arguments, valid call (of {f['expected_arguments_tasks']})",
            *pair("expected_arguments_hits", "expected_arguments_rate"),
        ),
        (
            "expected tool + arguments, any shape",
            *pair("expected_arguments_any_shape_hits", "expected_arguments_any_shape_rate"),
        ),
        ("turns", *both("turns")),
        ("turns cut at the token limit", *both("truncated_turns")),
        ("tokens generated", *both("tokens")),
        ("generate time (s)", f"{f['generate_seconds']:.1f}", f"{c['generate_seconds']:.1f}"),
        ("tokens per second", *both("tokens_per_second", tps)),
    ]
    return rows


def _markdown(report: Report) -> str:
    cfg, summary = report.config, report.summary
    f, c = summary["modes"]["free"], summary["modes"]["constrained"]
    lines = ["# toolgrammar compare: free vs constrained sampling", ""]
    if not report.ok:
        lines += [
            '<p style="color:red"><b>BUG: the constrained run made errors.</b></p>',
            "",
            f"**BUG: the constrained run made {c['errors']} invalid block(s) and {c['processor_errors']} row(s) left "
            "the grammar. The grammar must make every call valid; this is a toolgrammar bug. The runs are listed "
            "under 'Constrained errors' below.**",
            "",
        ]
    seeds = ", ".join(str(s) for s in cfg["seeds"])
    lines += [
        f"- Model: `{cfg['model']}` ({report.environment.get('model_source', '')})",
        f"- Tasks: {summary['runs'] // max(len(cfg['seeds']), 1)} x seeds [{seeds}] = {summary['runs']} runs per mode; "
        f"{cfg['turns']} turn(s) per run, {cfg['max_new_tokens']} new tokens per turn",
        f"- Sampling: temperature {cfg['temperature']}, top-p {cfg['top_p']}, top-k {cfg['top_k']}; "
        f"format `{cfg['format']}`, arguments `{cfg['mode']}`, parser `{cfg['parse_mode']}`, "
        f"tool_choice `{cfg['tool_choice']}`{', prose first' if cfg.get('prose_first') else ''}, "
        f"reasoning `{cfg['reasoning']}`, whitespace `{cfg['whitespace']}`",
        f"- Constrained side: {_policy_sentence(cfg)}",
        f"- Machine: {report.environment.get('machine', '')}",
        "",
        "| metric | free | constrained |",
        "|---|---:|---:|",
    ]
    lines += [
        f"| {'&nbsp;' * 2 * (len(m) - len(m.lstrip()))}{m.strip()} | {a} | {b} |" for m, a, b in summary_rows(summary)
    ]
    lines += ["", "## Errors the grammar hid", ""]
    hidden = summary["hidden_by_grammar"]
    if hidden:
        lines += [
            f"Intended calls that could not run: {f['intended_errors']} free, {c['intended_errors']} constrained: "
            f"**{summary['errors_hidden']} hidden by the grammar**.",
            "",
            "| error kind | free | constrained | hidden |",
            "|---|---:|---:|---:|",
        ]
        fk, ck = f["intended_error_kinds"], c["intended_error_kinds"]
        for kind, count in hidden.items():
            lines.append(f"| {kind} | {fk.get(kind, 0)} | {ck.get(kind, 0)} | {count} |")
    else:
        lines.append("The free run made no intended call that failed, so there was nothing to hide.")
    overhead = c["processor_seconds"]
    if c["generate_seconds"]:
        lines += [
            "",
            f"Time inside the logits processor: {overhead:.1f} s of {c['generate_seconds']:.1f} s of constrained "
            f"generation ({_pct(overhead, c['generate_seconds'])}).",
        ]
    bad = [r for r in report.runs if r["constrained"]["error_kinds"] or r["constrained"]["processor_errors"]]
    if bad:
        lines += ["", "## Constrained errors (bugs)", ""]
        for r in bad:
            for t in r["constrained"]["turns"]:
                if t["error_kinds"] or t["processor_error"]:
                    lines.append(
                        f"- seed {r['seed']}, task `{r['task_id']}`, turn {t['turn'] + 1}: "
                        f"{', '.join(t['errors']) or ''} {t['processor_error'] or ''}".rstrip()
                    )
    if has_matplotlib():
        lines += ["", "![error kinds and call rates](chart.png)", ""]
    else:
        lines += ["", "(No chart: matplotlib is not installed; `pip install 'toolgrammar[compare]'` brings it.)", ""]
    lines += ["## Runs", "", "| seed | task | free: blocks / valid / errors | constrained: blocks / valid / errors |"]
    lines += ["|---:|---|---|---|"]
    for r in report.runs:
        fr, cr = r["free"], r["constrained"]
        fe = ", ".join(f"{k} x{v}" for k, v in fr["error_kinds"].items()) or "-"
        ce = ", ".join(f"{k} x{v}" for k, v in cr["error_kinds"].items()) or "-"
        lines.append(
            f"| {r['seed']} | {r['task_id']} | {fr['blocks']} / {fr['valid_calls']} / {fe} | "
            f"{cr['blocks']} / {cr['valid_calls']} / {ce} |"
        )
    return "\n".join(lines) + "\n"


def _policy_sentence(cfg: Mapping[str, Any]) -> str:
    choice = cfg["tool_choice"]
    if choice == "auto":
        text = "`auto`: free text stays free; a block, when opened, is valid and closes in time"
        if cfg.get("steer_to_blocks"):
            text += "; steered: at call points the other call shapes' openers are moved onto the block opener"
        return text
    if choice == "none":
        return "`none`: no block"
    if choice == "required" and cfg.get("prose_first"):
        return "`required`, prose first: free text, then at least one block (the budget forces it at the end)"
    what = (
        "`required`: the turn is the call" if choice == "required" else f"named tool `{choice}`: the turn is that call"
    )
    if cfg.get("reasoning", "disabled") == "disabled":
        what += (
            "; both sides find the block opener pre-filled, so the free side is judged inside the blocks it was "
            "made to open"
        )
    return what


def write_chart(summary: Mapping[str, Any], path: Path) -> None:
    """A PNG: error kinds (left) and call rates (right), free vs constrained."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f, c = summary["modes"]["free"], summary["modes"]["constrained"]
    fk, ck = f["intended_error_kinds"], c["intended_error_kinds"]
    kinds = [k for k in INTENDED_ERROR_KINDS if fk.get(k) or ck.get(k)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"free": "#d62728", "constrained": "#1f77b4"}
    if kinds:
        y = range(len(kinds))
        left.barh([i - 0.2 for i in y], [fk.get(k, 0) for k in kinds], 0.4, label="free", color=colors["free"])
        left.barh(
            [i + 0.2 for i in y],
            [ck.get(k, 0) for k in kinds],
            0.4,
            label="constrained",
            color=colors["constrained"],
        )
        left.set_yticks(list(y), kinds)
        left.invert_yaxis()
        left.legend()
    else:
        left.text(
            0.5, 0.5, "no failed intended call in either mode", ha="center", va="center", transform=left.transAxes
        )
        left.set_yticks([])
    left.set_title("intended calls that cannot run, by error kind")
    left.set_xlabel("calls")

    def rate(mode: Mapping[str, Any], key: str) -> float:
        return mode[key] / mode["runs"] if mode["runs"] else 0.0

    labels = [
        "runs with an intended call",
        "runs with a valid call",
        "runs with another-shape call",
        "expected tool, any shape",
        "expected tool, valid call",
        "expected tool + args, valid",
    ]
    values = {
        name: [
            rate(m, "runs_with_intended_call"),
            rate(m, "runs_with_valid_call"),
            rate(m, "runs_with_other_shape_call"),
            m["expected_tool_any_shape_rate"] or 0.0,
            m["expected_tool_rate"] or 0.0,
            m["expected_arguments_rate"] or 0.0,
        ]
        for name, m in (("free", f), ("constrained", c))
    }
    x = range(len(labels))
    right.bar([i - 0.2 for i in x], values["free"], 0.4, label="free", color=colors["free"])
    right.bar([i + 0.2 for i in x], values["constrained"], 0.4, label="constrained", color=colors["constrained"])
    right.set_xticks(list(x), labels, rotation=15, ha="right")
    right.set_ylim(0, 1)
    right.set_ylabel("fraction of runs")
    right.set_title(f"call rates ({f['runs']} runs per mode)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------
# Output directory, resume


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _read_records(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []
    timings: list[dict[str, Any]] = []
    if not path.exists():
        return runs, timings
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by an interruption: its batch is incomplete and will be redone
        (runs if record.get("type") == "run" else timings).append(record)
    return runs, timings


def _replace_lines(path: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """Write ``records`` as JSON lines into a new file, then rename it over ``path``.

    Never in place: a kill during the write leaves the previous file whole (finished results are
    never rewritten where they lie).
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _batches(tasks: list[Task], size: int) -> list[list[Task]]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def _environment(generator: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "model_source": getattr(generator, "source", ""),
    }
    try:
        import torch

        env["machine"] += f", torch {torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:  # pragma: no cover
        pass
    return env


def prepare(config: CompareConfig) -> tuple[Any, list[Task]]:
    """Check the config and load tools and tasks; raises :class:`CompareError` (or ToolSchemaError) on bad input."""
    from .errors import ToolSchemaError
    from .tools import load_tools

    config.check()
    tools_path = Path(config.tools) if config.tools else bundled_tools_path()
    if not tools_path.is_file():
        raise CompareError(f"tools file {str(tools_path)!r} does not exist (pass --tools FILE.json)")
    try:
        tools = load_tools(tools_path, mode=config.mode)  # type: ignore[arg-type]
    except ToolSchemaError as error:
        raise CompareError(f"{tools_path}: {error}") from error
    tasks = load_tasks(Path(config.tasks) if config.tasks else bundled_tasks_path(), tools)
    if config.limit is not None:
        tasks = tasks[: config.limit]
    if config.tool_choice not in ("auto", "required", "none") and config.tool_choice not in tools:
        raise CompareError(f"--tool-choice {config.tool_choice!r} is not one of the tools: {', '.join(tools.names)}")
    if config.repo is not None and not Path(config.repo).is_dir():
        raise CompareError(f"sandbox repository {config.repo!r} is not a directory")
    return tools, tasks


def run_compare(
    config: CompareConfig,
    *,
    generator: Generator | None = None,
    on_run: Callable[[dict[str, Any]], None] | None = None,
) -> Report:
    """Run the side-by-side comparison and write its report into ``config.out``.

    Inputs are checked first (tools, tasks, options, the packages the model needs, the model's chat
    template); nothing is generated before they pass. ``generator`` replaces the transformers backend
    (tests pass scripted ones); ``on_run`` is called with each finished run record (tests use it to
    simulate an interruption).

    Raises
    ------
    CompareError
        Bad input, a package the model needs that is not installed (the message has the pip command),
        or ``--resume`` over an output directory written with another configuration.
    """
    tools, tasks = prepare(config)
    if generator is None:
        needed, _ = missing_requirements(config)
        if needed:  # said before anything is written, loaded or generated
            raise CompareError(missing_message(needed, what=f"--model {config.model}"))
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks_file = Path(config.tasks) if config.tasks else bundled_tasks_path()
    identity = {
        "version": _CONFIG_VERSION,
        "config": {k: v for k, v in config.to_dict().items() if k not in ("out", "resume", "progress")},
        "tools_fingerprint": tools.fingerprint,
        "tasks_sha256": _sha256_file(tasks_file),
        "task_ids": [t.id for t in tasks],
    }
    config_file, runs_file = out / "config.json", out / "runs.jsonl"
    if config.resume and config_file.exists():
        previous = json.loads(config_file.read_text(encoding="utf-8"))
        if previous != identity:
            changed = sorted(
                k
                for k in set(previous.get("config", {})) | set(identity["config"])
                if previous.get("config", {}).get(k) != identity["config"].get(k)
            ) + [k for k in ("tools_fingerprint", "tasks_sha256", "task_ids") if previous.get(k) != identity[k]]
            raise CompareError(
                f"--resume: {out} was written with a different configuration (differs in: {', '.join(changed)}); "
                "rerun with the same options, or drop --resume to start over"
            )

    try:  # everything that can fail on bad input fails here, before any generation
        if generator is None:
            from .models import load_model

            generator = HFGenerator(load_model(config.model), tools, config)
        prepare_generator = getattr(generator, "prepare", None)
        if prepare_generator is not None:
            prepare_generator()  # builds the grammar: bad tools or options for this tokenizer fail now
        try:
            prompt_example = generator.render(_initial_messages(tasks[0], config), tools.to_openai())
        except Exception as error:
            raise CompareError(
                f"model {config.model!r}: the chat template failed on the first task ({type(error).__name__}: {error})"
            ) from error
    except CompareError:
        raise
    except ToolgrammarError as error:
        raise CompareError(str(error)) from error

    size = config.batch_size or len(tasks)
    plan = [(seed, index, batch) for seed in config.seeds for index, batch in enumerate(_batches(tasks, size))]
    runs, timings = _read_records(runs_file) if config.resume else ([], [])
    done: set[tuple[int, int]] = set()
    if runs:
        by_batch = Counter((r["seed"], r["batch"]) for r in runs)
        expected = {(s, i): len(b) for s, i, b in plan}
        done = {key for key, n in by_batch.items() if expected.get(key) == n}
        runs = [r for r in runs if (r["seed"], r["batch"]) in done]
        timings = [t for t in timings if (t["seed"], t["batch"]) in done]
    config_file.write_text(json.dumps(identity, indent=2) + "\n", encoding="utf-8")
    _replace_lines(runs_file, timings + runs)  # only complete batches survive

    total = len(tasks) * len(config.seeds) * 2
    bar = _progress(total, config.progress, initial=2 * len(runs))
    try:
        for seed, index, batch in plan:
            if (seed, index) in done:
                continue
            per_mode: dict[str, list[dict[str, Any]]] = {}
            for mode in MODES:

                def on_step(what: str, step: int, seed: int = seed, index: int = index) -> None:
                    bar.tick(f"seed {seed} batch {index + 1} {what}: token {step}/{config.max_new_tokens}")

                records, mode_timings = _run_mode(
                    generator,
                    batch,
                    mode=mode,
                    seed=seed,
                    batch_index=index,
                    tools=tools,
                    config=config,
                    on_step=on_step,
                )
                per_mode[mode] = records
                timings.extend(mode_timings)
                with open(runs_file, "a", encoding="utf-8") as handle:
                    for record in mode_timings:
                        handle.write(json.dumps(record) + "\n")
                bar.update(len(batch))
            with open(runs_file, "a", encoding="utf-8") as handle:
                for position, task in enumerate(batch):
                    record = {
                        "type": "run",
                        "seed": seed,
                        "batch": index,
                        "task_id": task.id,
                        "task": task.to_dict(),
                        "prompt": task.prompt,
                        "free": per_mode["free"][position],
                        "constrained": per_mode["constrained"][position],
                    }
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                    handle.flush()
                    runs.append(record)
                    if on_run is not None:
                        on_run(record)
    finally:
        bar.close()

    order = {(s, t.id): (i, j) for i, s in enumerate(config.seeds) for j, t in enumerate(tasks)}
    runs.sort(key=lambda r: order.get((r["seed"], r["task_id"]), (1 << 30, 0)))
    environment = _environment(generator)
    environment["prompt_example"] = prompt_example
    report = Report(config.to_dict(), summarize(runs, timings, tools.names), runs, out, environment, timings)
    (out / "report.json").write_text(
        json.dumps(report.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    chart = out / "chart.png"
    if has_matplotlib():
        write_chart(report.summary, chart)
    else:
        chart.unlink(missing_ok=True)  # never leave an older run's chart beside this report
    (out / "report.md").write_text(_markdown(report), encoding="utf-8")
    return report


def has_matplotlib() -> bool:
    """Whether the chart can be drawn (matplotlib comes with the ``compare`` extra)."""
    return MATPLOTLIB.installed()


def missing_requirements(config: CompareConfig) -> tuple[list[Requirement], list[Requirement]]:
    """The optional packages a run of ``config`` lacks, found without importing them: ``(needed, nice)``.

    ``needed``: without them the run cannot start (torch and transformers; what ``--model`` loads, see
    :func:`toolgrammar.extras.model_requirements`). ``nice``: the run goes on without them, but with
    less (matplotlib: no chart.png; tqdm: no progress bar).
    """
    needed = missing(model_requirements(config.model))
    nice = missing([MATPLOTLIB, *([TQDM] if config.progress else [])])
    return needed, nice


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def tick(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar(_NoBar):
    """A tqdm bar over runs whose postfix shows the token being generated (on CPU a batch takes minutes).

    The postfix is redrawn at most once a second on a terminal and once every 30 s otherwise, so logs
    stay readable.
    """

    def __init__(self, total: int, initial: int):
        import sys

        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="run", desc="compare", dynamic_ncols=True)
        self.every = 1.0 if sys.stderr.isatty() else 30.0
        self.last = 0.0

    def update(self, n: int = 1) -> None:
        self.bar.update(n)

    def tick(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self.bar.set_postfix_str(text)

    def close(self) -> None:
        self.bar.close()


def _progress(total: int, enabled: bool, *, initial: int = 0) -> _NoBar:
    if not enabled:
        return _NoBar()
    try:
        return _Bar(total, initial)
    except ImportError:  # pragma: no cover - tqdm comes with the compare extra
        return _NoBar()
