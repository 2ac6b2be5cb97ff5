"""Relevance gates: does any offered tool fit the request? Asked before steering acts.

Why: steering (:mod:`toolgrammar.runtime.steering`) turns a call the model wrote in another shape into a
real block. That is right when the model meant a call the user wants, and wrong when the request has
nothing to do with the tools: a small model also writes fenced "calls" to an unrelated tool (asked for
the area of a triangle with only ``determine_body_mass_index`` offered, Qwen2.5-Coder-0.5B writes
``determine_body_mass_index(weight=10, height=5)`` in a fence). Unsteered, such a call never runs;
steered, it becomes a valid block, and BFCL's ``irrelevance`` category counts it as a failure. A gate
scores each conversation once, before its first turn, and lets steering act only where it says the
request is relevant. Two methods, both from the model itself (no other model, no word lists):

``pmi`` (the default): whether the functions' descriptions make the request more likely. Two
teacher-forced passes over the last user message as plain text, once after a list of the functions
and once after a neutral header::

    Functions:
    - name(param, param): description
    ...

    A request one of these functions serves:
    <the request>

    A request:
    <the request>

``score`` is the mean, over the request's tokens, of ``log P(token | functions) - log P(token |
neutral)`` (pointwise mutual information, nats per token); relevant when it is at least the
threshold, 0.0 by default: the functions explain the request better than nothing does. The request's
tokens are the same in both passes (tokenized once).

``question``: one forward pass over a yes/no question rendered with the model's chat template (no
tools in the template: the functions are listed in the question itself)::

    Request: <the last user message>
    Functions:
    - name(param, param): description
    ...
    Can one of these functions, called now, do what the request asks? Answer yes or no.

then the next-token probability mass of the "yes" tokens against the "no" tokens (each spelled
``yes``/``Yes``/``YES``, with and without a leading space, where that spelling is one token of the
vocabulary): ``score = P(yes) / (P(yes) + P(no))``, relevant at 0.5 or above by default.

``name``: whether the model, calling now, would name one of the offered tools
(:mod:`toolgrammar.runtime.name_fit`): the conversation rendered with its tools by the chat template, the
format's call as far as the name, then the model's probability of an offered name along its likeliest
path through the names; relevant at 0.5 or above by default (more likely an offered tool than not).
It catches what the other two miss on near-miss requests: a model that means a tool it was not
offered (a ``calculate_car_travel_distance`` where only ``calculate_projectile_range`` is offered),
whose steered block the grammar would hold to the offered name, a valid call to the wrong tool.

Methods combine with ``+`` (``pmi+name``): every part judges, and the request is relevant only when
all of them say so; the verdict's ``score`` is then the share of parts that said yes, its
``threshold`` 1.0, and ``parts`` holds each part's own verdict.

Prompts and thresholds were fixed before any score on the items the README reports was seen (the
``name`` gate's 0.5 is "more likely than not", not fitted);
``bench/relevance_gate.py`` measures each gate alone on other BFCL items. On Qwen2.5-Coder-0.5B the
question does not separate (it says yes to every ``irrelevance`` item); PMI and the name fit do, partly,
and differently (PMI misses near-miss tools, the name fit misses requests the model would serve with
an offered tool that does not do what is asked).

Several conversations are judged in batched forwards (left padding, position ids from the attention
mask, so a batched verdict equals the unbatched one up to float rounding); the ``name`` gate walks one
conversation at a time (one pass over the prompt, then a cached step per token of the name).

Import boundary: no torch or transformers at import time; they are imported when a gate judges.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolgrammar.errors import ToolgrammarError
from toolgrammar.formats import get_format
from toolgrammar.runtime.name_fit import NameFitError, Spelling, call_targets, name_fit, takes_keyword

__all__ = [
    "DEFAULT_THRESHOLDS",
    "METHODS",
    "NEUTRAL_HEADER",
    "NO_SPELLINGS",
    "PMI_HEADER",
    "QUESTION",
    "YES_SPELLINGS",
    "Relevance",
    "RelevanceError",
    "RelevanceGate",
    "describe_gate",
    "gate_methods",
    "judge_relevance",
    "pmi_prompts",
    "relevance_question",
    "score_text",
    "yes_no_tokens",
]

METHODS: tuple[str, ...] = ("pmi", "question", "name")
"""The gates: pointwise mutual information of the request and the functions, a yes/no question, or the
probability that the model names an offered tool (combine them with ``+``)."""
DEFAULT_THRESHOLDS: dict[str, float] = {"pmi": 0.0, "question": 0.5, "name": 0.5}
"""Per method, the score at or above which a request counts as relevant."""
PMI_HEADER = "Functions:\n{functions}\n\nA request one of these functions serves:\n"
"""What the request follows in the ``pmi`` gate's conditioned pass (``{functions}``: one line each)."""
NEUTRAL_HEADER = "A request:\n"
"""What the request follows in the ``pmi`` gate's neutral pass."""
QUESTION = "Can one of these functions, called now, do what the request asks? Answer yes or no."
"""The last line of the verification prompt."""
YES_SPELLINGS: tuple[str, ...] = ("yes", "Yes", "YES", " yes", " Yes", " YES")
NO_SPELLINGS: tuple[str, ...] = ("no", "No", "NO", " no", " No", " NO")


class RelevanceError(ToolgrammarError, ValueError):
    """The gate cannot judge: no single-token yes/no in the vocabulary, no user message, no tools, bad options."""


def gate_methods(method: object) -> tuple[str, ...]:
    """The methods a gate name stands for: one of :data:`METHODS`, or several joined by ``+`` (all must agree).

    Raises :class:`RelevanceError` naming what is wrong.
    """
    parts = tuple(method.split("+")) if isinstance(method, str) else ()
    if not parts or any(p not in METHODS for p in parts):
        raise RelevanceError(
            f"the relevance gate's method must be one of {', '.join(METHODS)}, or several joined by '+' "
            f"(pmi+name), got {method!r}"
        )
    if len(set(parts)) != len(parts):
        raise RelevanceError(f"the relevance gate {method!r} names a method twice")
    return parts


@dataclass(frozen=True)
class Relevance:
    """A gate's verdict on one conversation."""

    score: float
    """``pmi``: nats per request token the functions add; ``question``: P(yes) / (P(yes) + P(no))."""
    relevant: bool
    """``score >= threshold``: some tool fits the request, so steering may act."""
    threshold: float
    method: str
    parts: tuple[Relevance, ...] = ()
    """A combined gate's (``pmi+name``) verdict per method; empty for a single method."""

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "score": self.score, "relevant": self.relevant, "threshold": self.threshold}
        if self.parts:
            out["parts"] = [p.to_dict() for p in self.parts]
        return out


def score_text(verdict: Relevance | Mapping[str, Any]) -> str:
    """A verdict's score in a report (a :class:`Relevance` or its ``to_dict()``): ``0.42``, or per part for a
    combined gate (``pmi 0.42 / name 0.97``)."""
    record = verdict.to_dict() if isinstance(verdict, Relevance) else verdict
    parts = record.get("parts") or ()
    if parts:
        return " / ".join(f"{p['method']} {p['score']:.2f}" for p in parts)
    return f"{record['score']:.2f}"


def describe_gate(method: str, threshold: float | None = None) -> str:
    """When a gate lets steering act, in words (reports and benchmarks say it the same way)."""
    parts = gate_methods(method)
    if len(parts) > 1:
        if threshold not in (None, 1.0):
            raise RelevanceError(f"a combined gate ({method}) takes no threshold of its own, got {threshold!r}")
        return " and ".join(describe_gate(p) for p in parts)
    threshold = DEFAULT_THRESHOLDS[method] if threshold is None else threshold
    if method == "pmi":
        return (
            "where the functions' descriptions make the request more likely (mean log-probability gain per "
            f"request token, nats, >= {threshold})"
        )
    if method == "name":
        return (
            "where the model, calling now, would name one of the offered tools (its probability of an offered "
            f"name, >= {threshold})"
        )
    return (
        "where the model answers yes to whether one of the functions can do what the request asks "
        f"(P(yes) / (P(yes) + P(no)) >= {threshold})"
    )


# --------------------------------------------------------------------------------------------------
# The prompt


def _functions(tools: Any) -> list[Mapping[str, Any]]:
    """The function entries of a ToolSet, an OpenAI tool list, or a list of plain function dicts."""
    if hasattr(tools, "to_openai"):
        tools = tools.to_openai()
    if isinstance(tools, Mapping | str | bytes) or not isinstance(tools, Sequence):
        raise RelevanceError(f"tools must be a list of tools (OpenAI format) or a ToolSet, got {type(tools).__name__}")
    out = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RelevanceError(f"every tool needs a function name, got {tool!r}")
        out.append(fn)
    if not out:
        raise RelevanceError("the relevance gate needs at least one tool")
    return out


def _last_user_message(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, Sequence):  # a list of content parts: keep the text ones
                return "\n".join(
                    p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
                )
    raise RelevanceError("the relevance gate needs a user message in the conversation")


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def _function_lines(tools: Any) -> list[str]:
    """``- name(param, param): description``, one line per function."""
    lines = []
    for fn in _functions(tools):
        parameters = fn.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        names = ", ".join(properties) if isinstance(properties, Mapping) else ""
        description = _one_line(fn.get("description"))
        lines.append(f"- {fn['name']}({names})" + (f": {description}" if description else ""))
    return lines


def relevance_question(messages: Sequence[Mapping[str, Any]], tools: Any) -> str:
    """The verification question (the user message of the gate's prompt) for a conversation and its tools."""
    lines = [f"Request: {_last_user_message(messages).strip()}", "Functions:", *_function_lines(tools), QUESTION]
    return "\n".join(lines)


def pmi_prompts(messages: Sequence[Mapping[str, Any]], tools: Any) -> tuple[str, str, str]:
    """The ``pmi`` gate's texts: (header with the functions, neutral header, the request)."""
    request = _last_user_message(messages).strip()
    if not request:
        raise RelevanceError("the relevance gate needs a non-empty user message")
    return PMI_HEADER.format(functions="\n".join(_function_lines(tools))), NEUTRAL_HEADER, request


# --------------------------------------------------------------------------------------------------
# The tokens


def yes_no_tokens(tokenizer: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The ids of the single-token spellings of "yes" and of "no" in ``tokenizer``'s vocabulary.

    A spelling counts when the tokenizer encodes it as exactly one token (no special tokens added).
    Raises :class:`RelevanceError` naming the spellings tried when either side has none.
    """

    def single(spellings: tuple[str, ...]) -> tuple[int, ...]:
        found: list[int] = []
        for text in spellings:
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1 and int(ids[0]) not in found:
                found.append(int(ids[0]))
        return tuple(found)

    yes, no = single(YES_SPELLINGS), single(NO_SPELLINGS)
    for word, ids, spellings in (("yes", yes, YES_SPELLINGS), ("no", no, NO_SPELLINGS)):
        if not ids:
            raise RelevanceError(
                f"the relevance gate needs {word!r} as a single token, and this tokenizer encodes none of "
                f"{list(spellings)} as one; use --steer-gate none with this model"
            )
    if set(yes) & set(no):
        raise RelevanceError(f"the tokenizer encodes a yes and a no spelling as the same token ({set(yes) & set(no)})")
    return yes, no


# --------------------------------------------------------------------------------------------------
# The gate


class RelevanceGate:
    """Judges conversations with a loaded transformers causal LM and its tokenizer (see the module docstring).

    ``gate(conversations)`` takes ``(messages, tools)`` pairs and returns one :class:`Relevance` each,
    from batched forward passes of ``batch_size`` conversations (``None``: all at once for ``question``,
    4 at a time for ``pmi``, whose passes keep the logits of every request token; ``name`` walks one
    conversation at a time). ``format`` is the tool-call format the ``name`` gate writes the call in.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        method: str = "pmi",
        threshold: float | None = None,
        format: str = "hermes",
    ):
        parts = gate_methods(method)
        self.model = model
        self.tokenizer = tokenizer
        self.method = method
        self.parts: tuple[RelevanceGate, ...] = ()
        if len(parts) > 1:
            if threshold is not None:
                raise RelevanceError(
                    f"a combined gate ({method}) uses each method's own threshold; threshold must be None, "
                    f"got {threshold!r}"
                )
            self.parts = tuple(RelevanceGate(model, tokenizer, method=p, format=format) for p in parts)
            self.threshold = 1.0
            return
        if threshold is None:
            threshold = DEFAULT_THRESHOLDS[method]
        low, high = (-math.inf, math.inf) if method == "pmi" else (0.0, 1.0)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not low <= threshold <= high:
            where = "(nats per token)" if method == "pmi" else "in [0, 1]"
            raise RelevanceError(f"threshold must be a number {where} for the {method} gate, got {threshold!r}")
        self.threshold = float(threshold)
        if method == "question":
            self.yes_ids, self.no_ids = yes_no_tokens(tokenizer)
        if method == "name":
            self.format = get_format(format)
            self._spelling: Spelling | None = None
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0

    def prompt(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> str:
        """The ``question`` gate's prompt text: the question as the only user turn, through the chat template."""
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": relevance_question(messages, tools)}],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,  # the answer is the next token (Qwen3 templates; others ignore it)
        )

    def __call__(
        self, conversations: Sequence[tuple[Sequence[Mapping[str, Any]], Any]], *, batch_size: int | None = None
    ) -> list[Relevance]:
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise RelevanceError(f"batch_size must be a positive int or None, got {batch_size!r}")
        if self.parts:
            verdicts = [part(conversations, batch_size=batch_size) for part in self.parts]
            return [
                Relevance(sum(v.relevant for v in each) / len(each), all(v.relevant for v in each), 1.0,
                          self.method, tuple(each))
                for each in zip(*verdicts, strict=True)
            ]  # fmt: skip
        if self.method == "name":
            return [self._verdict(self.name_fit(messages, tools)) for messages, tools in conversations]
        if self.method == "question":
            items: list[Any] = [self.prompt(messages, tools) for messages, tools in conversations]
            score: Any = self.p_yes
        else:
            items = [pmi_prompts(messages, tools) for messages, tools in conversations]
            score = self.pmi
        size = batch_size or (max(len(items), 1) if self.method == "question" else 4)
        out: list[Relevance] = []
        for start in range(0, len(items), size):
            out.extend(self._verdict(value) for value in score(items[start : start + size]))
        return out

    def _verdict(self, score: float) -> Relevance:
        return Relevance(score, score >= self.threshold, self.threshold, self.method)

    def name_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> str:
        """The ``name`` gate's prompt: the conversation with its tools through the chat template (no thinking)."""
        _last_user_message(messages)  # the same error as the other gates for a conversation without a request
        return self.tokenizer.apply_chat_template(
            list(messages),
            tools=[{"type": "function", "function": dict(fn)} for fn in _functions(tools)],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,  # the call would come first (Qwen3 templates; others ignore it)
        )

    def name_fit(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> float:
        """The ``name`` score of one conversation (:func:`toolgrammar.runtime.name_fit.name_fit`)."""
        if self._spelling is None:
            from toolgrammar.integrations.hf import vocabulary_of  # torch: only once a gate scores

            vocab = vocabulary_of(self.tokenizer)
            self._spelling = Spelling.of(vocab.token_bytes, exclude=sorted(vocab.eos_ids))
        names = [fn["name"] for fn in _functions(tools)]
        try:
            head, targets = call_targets(self.format, names)
            ids = self.tokenizer.encode(self.name_prompt(messages, tools) + head, add_special_tokens=False)
            return name_fit(self.model, ids, head, targets, self._spelling)
        except NameFitError as exc:
            raise RelevanceError(f"the name gate cannot judge: {exc}") from exc

    def _forward(self, encoded: Sequence[Sequence[int]], keep: int) -> Any:
        """Log-probabilities (float64) at the last ``keep`` positions of each row, from one left-padded pass."""
        import torch

        width = max(len(e) for e in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):  # left padding, by hand: the shared tokenizer is never mutated
            input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
        device = getattr(self.model, "device", None) or torch.device("cpu")
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(device),
            "attention_mask": attention.to(device),
            "position_ids": positions.to(device),
            "use_cache": False,
        }
        if takes_keyword(self.model, "logits_to_keep"):
            kwargs["logits_to_keep"] = keep  # only the positions that are scored
        with torch.inference_mode():
            logits = self.model(**kwargs).logits[:, -keep:, :].double()
        return torch.log_softmax(logits, dim=-1).cpu()

    def p_yes(self, prompts: Sequence[str]) -> list[float]:
        """The ``question`` score for already rendered prompts, in one batched forward pass."""
        import torch

        if not prompts:
            return []
        logp = self._forward([self.tokenizer.encode(p, add_special_tokens=False) for p in prompts], 1)[:, -1, :]
        yes = torch.logsumexp(logp[:, list(self.yes_ids)], dim=-1)
        no = torch.logsumexp(logp[:, list(self.no_ids)], dim=-1)
        p = torch.exp(yes - torch.logaddexp(yes, no))
        return [float(v) if math.isfinite(float(v)) else 0.0 for v in p.tolist()]

    def pmi(self, texts: Sequence[tuple[str, str, str]]) -> list[float]:
        """The ``pmi`` score for ``(functions header, neutral header, request)`` triples: two batched passes."""
        import torch

        if not texts:
            return []
        encode = self.tokenizer.encode
        requests = [encode(request, add_special_tokens=False) for _, _, request in texts]
        if any(not r for r in requests):
            raise RelevanceError("the relevance gate needs a user message that tokenizes to at least one token")
        keep = max(len(r) for r in requests) + 1
        totals = []
        for header in (0, 1):  # with the functions, then the neutral header
            encoded = [encode(t[header], add_special_tokens=False) + r for t, r in zip(texts, requests, strict=True)]
            logp = self._forward(encoded, keep)
            row_totals = []
            for row, request in enumerate(requests):
                # position keep-1-len(request)+i predicts the request's token i (the last position predicts beyond)
                first = keep - 1 - len(request)
                picked = logp[row, first : first + len(request)].gather(1, torch.tensor(request).unsqueeze(1))
                row_totals.append(float(picked.sum()))
            totals.append(row_totals)
        return [(a - b) / len(r) for a, b, r in zip(totals[0], totals[1], requests, strict=True)]


def judge_relevance(
    model: Any,
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Any,
    *,
    method: str = "pmi",
    threshold: float | None = None,
    format: str = "hermes",
) -> Relevance:
    """A gate's verdict on one conversation (see :class:`RelevanceGate` for several at once)."""
    return RelevanceGate(model, tokenizer, method=method, threshold=threshold, format=format)([(messages, tools)])[0]
