"""Name fit: how likely the model, calling now, names one of the offered tools.

Why: steering (:mod:`toolgrammar.runtime.steering`) makes a call the model wrote in another shape a real block,
and the grammar then holds the block's name to the offered tools. When the model meant a tool it was
not offered (asked for a triangle's area with only ``determine_body_mass_index`` offered,
Qwen2.5-Coder-0.5B names ``calculate_triangle_area``), the grammar hides that: the block names an
offered tool the model did not mean, a valid call to the wrong tool. The name fit measures, before
the turn, how much of the model's probability the grammar would have to remove to name an offered
tool; the ``name`` relevance gate lets steering act only where that share is small.

The score, for one conversation: the rendered prompt, then the format's call as far as the name
(hermes: ``<tool_call>\\n{"name": "``), then the name. From the prompt, a walk follows the model's
likeliest token among those that keep the text on the way to one of the *targets* (the call's head,
an offered name, and the character that ends a name in this format), until a target is complete.
At each step that writes part of a name, the walk multiplies in the probability mass of all the
tokens that keep it on the way (a token may also run past a target's end: ``",`` after a name). So

    score = product over the name's steps of P(a token that still leads to an offered name)

the model's probability of naming an offered tool along its likeliest path through the names (the
head's steps are forced, as steering forces the opener; they do not count). A model that means an
offered tool scores near 1; one that means another tool loses the mass of its own name's tokens.

Import boundary: no torch at import time; :func:`name_fit` imports it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toolgrammar.errors import ToolgrammarError

__all__ = ["NameFitError", "Spelling", "call_targets", "name_fit", "takes_keyword", "walk_name_fit"]

PROBE = "toolgrammar_name_probe"
"""A name no format writes into its own markers: where it starts in a rendered call is where names start."""


class NameFitError(ToolgrammarError, ValueError):
    """The name fit cannot be measured: a format whose calls do not start alike, a name it cannot spell."""


def call_targets(fmt: Any, names: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """The text every call of ``fmt`` starts with before its name, and per name that text, the name and
    the character after it (the one that ends the name).

    Raises :class:`NameFitError` when ``fmt`` writes a name other than as given, or writes something
    between the head and the name that differs per tool.
    """
    if not names:
        raise NameFitError("the name fit needs at least one tool name")
    probe = fmt.render_call(PROBE, {})
    at = probe.find(PROBE)
    if at < 0:
        raise NameFitError(f"format {fmt.name!r} does not write a tool's name into its call as given")
    head = probe[:at]
    targets = []
    for name in names:
        text = fmt.render_call(name, {})
        end = len(head) + len(name)
        if not text.startswith(head + name) or len(text) <= end:
            raise NameFitError(
                f"format {fmt.name!r} renders tool {name!r}'s call as {text!r}, which does not start with "
                f"{head!r} then the name and a character that ends it"
            )
        targets.append(text[: end + 1])
    return head, tuple(targets)


@dataclass(frozen=True)
class Spelling:
    """Which tokens of a vocabulary can write a given text next (built once per vocabulary)."""

    texts: tuple[bytes, ...]
    """Per token id, its text (``b""`` for the ids left out)."""
    by_bytes: dict[bytes, tuple[int, ...]]
    """Token text -> the ids with exactly that text."""
    sorted_bytes: tuple[bytes, ...]
    """Every token text, sorted: the tokens that start with a text are one run of it."""
    sorted_ids: tuple[int, ...]
    longest: int

    @classmethod
    def of(cls, token_bytes: Sequence[bytes], exclude: Sequence[int] = ()) -> Spelling:
        """From a vocabulary's token texts; ``exclude`` (the end-of-turn ids) and empty texts are left out."""
        skip = set(exclude)
        pairs = sorted((b, i) for i, b in enumerate(token_bytes) if b and i not in skip)
        by_bytes: dict[bytes, list[int]] = {}
        for b, i in pairs:
            by_bytes.setdefault(b, []).append(i)
        return cls(
            tuple(b if i not in skip else b"" for i, b in enumerate(token_bytes)),
            {b: tuple(ids) for b, ids in by_bytes.items()},
            tuple(b for b, _ in pairs),
            tuple(i for _, i in pairs),
            max((len(b) for b, _ in pairs), default=0),
        )

    def leading_to(self, rests: Sequence[bytes]) -> list[int]:
        """The ids whose text is a prefix of one of ``rests`` or starts with a whole one (sorted)."""
        ids: set[int] = set()
        for rest in rests:
            for k in range(1, min(len(rest), self.longest) + 1):
                ids.update(self.by_bytes.get(rest[:k], ()))
            j = bisect.bisect_left(self.sorted_bytes, rest)
            while j < len(self.sorted_bytes) and self.sorted_bytes[j].startswith(rest):
                ids.add(self.sorted_ids[j])
                j += 1
        return sorted(ids)


def name_fit(model: Any, ids: Sequence[int], head: str, targets: Sequence[str], spelling: Spelling) -> float:
    """The score of the module docstring for one prompt, from ``call_targets``'s output, on a transformers model.

    ``ids``: the tokenizer's encoding of the prompt followed by ``head`` (so the head's markers are the
    tokens the model knows, ``<tool_call>`` one token). One forward pass over the prompt, then one cached step
    per token of the walk (:func:`walk_name_fit`).
    """
    import torch

    device = getattr(model, "device", None) or torch.device("cpu")
    state: dict[str, Any] = {}

    def first(prompt: list[int]) -> Any:
        kwargs: dict[str, Any] = {"input_ids": torch.tensor([prompt], device=device), "use_cache": True}
        if takes_keyword(model, "logits_to_keep"):
            kwargs["logits_to_keep"] = 1
        state["out"] = model(**kwargs)
        return state["out"].logits[0, -1].double().cpu().numpy()

    def then(token: int) -> Any:
        step = torch.tensor([[token]], device=device)
        state["out"] = model(input_ids=step, past_key_values=state["out"].past_key_values, use_cache=True)
        return state["out"].logits[0, -1].double().cpu().numpy()

    with torch.inference_mode():
        return walk_name_fit(first, then, ids, head, targets, spelling)


def walk_name_fit(
    first: Callable[[list[int]], Any],
    then: Callable[[int], Any],
    ids: Sequence[int],
    head: str,
    targets: Sequence[str],
    spelling: Spelling,
) -> float:
    """The walk of the module docstring on any engine: ``first(prompt_ids)`` gives the next-token logits after
    the prompt (a 1-D array), ``then(token)`` after one more token.

    ``ids``' last token is walked again rather than forced, so that a token joining the head's last characters
    to a name's first ones can be chosen.
    """
    import numpy as np

    wanted = [t.encode("utf-8") for t in targets]
    head_bytes = head.encode("utf-8")
    tail = spelling.texts[ids[-1]] if ids and 0 <= ids[-1] < len(spelling.texts) else b""
    if tail and head_bytes.endswith(tail):
        prompt, written = list(ids[:-1]), head_bytes[: len(head_bytes) - len(tail)]
    else:  # the head ends with a marker token (or is empty): it is all forced
        prompt, written = list(ids), head_bytes
    log_score = 0.0
    logits = np.asarray(first(prompt), dtype=np.float64)
    for _ in range(max(len(w) for w in wanted) + 1):  # each step writes at least one byte
        rests = [w[len(written) :] for w in wanted if w.startswith(written)]
        allowed = spelling.leading_to(rests)
        if not allowed:
            raise NameFitError(f"no token of the vocabulary continues {written!r} towards an offered name")
        shifted = np.exp(logits - logits.max())
        probs = shifted[allowed] / shifted.sum()
        best = allowed[int(np.argmax(probs))]
        token = spelling.texts[best]
        if len(written) + len(token) > len(head_bytes):  # this step writes part of a name
            log_score += math.log(max(float(probs.sum()), 1e-300))
        written += token
        if any(written.startswith(w) for w in wanted):
            return math.exp(log_score)
        logits = np.asarray(then(best), dtype=np.float64)
    raise NameFitError(f"the walk towards an offered name did not end (wrote {written!r})")  # pragma: no cover


def takes_keyword(model: Any, name: str) -> bool:
    """Whether ``model.forward`` has a parameter ``name`` (``logits_to_keep`` is newer than some models)."""
    import inspect

    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False
