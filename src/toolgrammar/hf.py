"""transformers integration: :class:`ToolCallLogitsProcessor` for ``model.generate``.

    proc = ToolCallLogitsProcessor(tokenizer, tools, max_new_tokens=256)
    out = model.generate(**inputs, logits_processor=LogitsProcessorList([proc]), max_new_tokens=256)

The processor is thin: the grammar is compiled once (and shared by every processor built for the
same tokenizer, tools and options), each row of the batch has its own cursor, and each step applies
one batched operation per mask kind. No Python loop over the vocabulary, no per-row host-device
copy: the sampled tokens come to the host once per step (one small copy), the index tensors of each
state's mask go to the device once and stay there.

The same processor object can serve several ``generate`` calls: a new call is recognised when the
input no longer extends the previous step's input by exactly one token (``reset()`` forces it).
Beam search works: when rows are reordered between steps, each row's cursor is taken from the row
whose sequence it extends.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import torch

from .engine import Cursor, TokenGrammar, token_grammar
from .errors import ProcessorError
from .grammar import compile_turn
from .masking import MaskApplier
from .vocab import Vocabulary

try:  # transformers is the point of this module, but keep the class importable for type checks
    from transformers import LogitsProcessor
except ImportError:  # pragma: no cover
    LogitsProcessor = object  # type: ignore[assignment,misc]

_vocabularies: dict[int, tuple[weakref.ref, Vocabulary]] = {}


def vocabulary_of(tokenizer: Any) -> Vocabulary:
    """The :class:`~toolgrammar.vocab.Vocabulary` of a transformers tokenizer, built once per tokenizer object."""
    if isinstance(tokenizer, Vocabulary):
        return tokenizer
    key = id(tokenizer)
    hit = _vocabularies.get(key)
    if hit is not None and hit[0]() is tokenizer:
        return hit[1]
    vocab = Vocabulary.from_hf(tokenizer)
    with contextlib.suppress(TypeError):  # not weak-referenceable: do not cache
        _vocabularies[key] = (weakref.ref(tokenizer), vocab)
    return vocab


class ToolCallLogitsProcessor(LogitsProcessor):
    """Masks logits so that every tool-call block is valid, closed in time, and free text stays free.

    Parameters
    ----------
    tokenizer :
        The model's transformers tokenizer (or a :class:`~toolgrammar.vocab.Vocabulary`).
    tools :
        Anything :func:`toolgrammar.tools.load_tools` takes (OpenAI tool list, JSON file path, ToolSet).
    max_new_tokens : int | None, default: None
        The same number given to ``generate``. With it, a block that has started always closes
        within the budget, and a block is never opened that could not close in time.
    mode : {"schema", "strings"}, default: "schema"
        Argument rule: each tool's JSON Schema, or the seed harness's all-strings rule.
    **options :
        Grammar options (:class:`toolgrammar.grammar.GrammarOptions`): ``format``, ``tool_choice``,
        ``parallel_tool_calls``, ``reasoning``, ``whitespace``, ``max_whitespace``,
        ``escape_markers``, ``after_calls``.

    Notes
    -----
    Logit columns beyond the tokenizer (Qwen3 models have 151,936 columns for 151,669 ids) are
    always masked. Outside blocks nothing else is touched, except what the tool-choice policy or the
    budget demands (``none`` removes the opener; ``required`` forbids ending before a call; near the
    end of the budget the opener is removed when a call could no longer close).
    """

    def __init__(
        self, tokenizer: Any, tools: Any, *, max_new_tokens: int | None = None, mode: str = "schema", **options: Any
    ):
        if max_new_tokens is not None and (not isinstance(max_new_tokens, int) or max_new_tokens < 1):
            raise ProcessorError(f"max_new_tokens must be a positive int or None, got {max_new_tokens!r}")
        self.vocab = vocabulary_of(tokenizer)
        self.turn_grammar = compile_turn(tools, mode=mode, **options)
        self.grammar: TokenGrammar = token_grammar(self.turn_grammar, self.vocab)
        self.max_new_tokens = max_new_tokens
        self._applier = MaskApplier()
        self.reset()

    # -- state -------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the current generation; the next call starts from its input as the prompt."""
        self.cursors: list[Cursor] = []
        self._prev_ids: torch.Tensor | None = None
        self._prev_bytes: bytes | None = None  # the host path's copy of the last input (see _call_host_row)
        self.prompt_length = 0

    @property
    def errors(self) -> list[str | None]:
        """Per row: ``None``, or why the row left the grammar (a token the grammar rejected)."""
        return [c.error for c in self.cursors]

    def _start(self, input_ids: torch.Tensor) -> None:
        self.cursors = [Cursor(self.grammar, self.max_new_tokens) for _ in range(input_ids.shape[0])]
        self.prompt_length = input_ids.shape[1]

    def _sync(self, input_ids: torch.Tensor) -> None:
        prev = self._prev_ids
        b, length = input_ids.shape
        if prev is None or prev.shape[0] != b or prev.shape[1] + 1 != length:
            self._start(input_ids)
            self._prev_ids = input_ids
            return
        if not torch.equal(input_ids[:, :-1], prev) and not self._reorder(input_ids, prev):
            self._start(input_ids)  # not an extension of the last step: a new generate() call
            self._prev_ids = input_ids
            return
        last = input_ids[:, -1].tolist()
        for cursor, token in zip(self.cursors, last, strict=True):
            cursor.advance(int(token))
        self._prev_ids = input_ids

    def _reorder(self, input_ids: torch.Tensor, prev: torch.Tensor) -> bool:
        """Rows were reordered (beam search): give each row the cursor of the row it extends.

        Returns False when some row extends no previous row (then this is a new generation).
        """
        index = {tuple(row): i for i, row in enumerate(prev[:, self.prompt_length :].tolist())}
        new = []
        for row in input_ids[:, self.prompt_length : -1].tolist():
            parent = index.get(tuple(row))
            if parent is None:
                return False
            new.append(self.cursors[parent].fork())
        self.cursors = new
        return True

    # -- masking -----------------------------------------------------------------------------

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if scores.dtype is torch.float32 and scores.is_cpu and input_ids.is_cpu and not scores.requires_grad:
            done = self._call_host_row(input_ids, scores)
            if done is not None:
                return done
        self._prev_bytes = None
        if scores.dim() != 2 or input_ids.dim() != 2 or scores.shape[0] != input_ids.shape[0]:
            raise ProcessorError(
                f"expected input_ids (batch, length) and scores (batch, vocab) with the same batch, got "
                f"{tuple(input_ids.shape)} and {tuple(scores.shape)}"
            )
        n_tokens = self.grammar.table.n_tokens
        width = scores.shape[1]
        if width < n_tokens:
            raise ProcessorError(
                f"scores have {width} columns but the tokenizer has {n_tokens} ids; pass the tokenizer of this model"
            )
        self._sync(input_ids)
        masks = [c.mask() for c in self.cursors]
        rows = [r for r, m in enumerate(masks) if m is not None]
        if len(rows) < len(masks) and width > n_tokens:
            scores[:, n_tokens:] = -float("inf")  # finished rows too: padding columns are never text
        self._applier.apply(scores, rows, [masks[r] for r in rows], n_tokens)
        return scores

    def _call_host_row(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor | None:
        """One row on the host, through numpy views: about a third of the torch path's per-step cost.

        The sequence is compared with the previous call's as bytes (it must be that input plus one
        token), and the mask is one numpy write. ``None`` when this path does not apply (a batch, or a
        shape the checks below reject with their error).
        """
        ids = input_ids.numpy()
        sc = scores.numpy()
        n_tokens = self.grammar.table.n_tokens
        if sc.ndim != 2 or ids.ndim != 2 or sc.shape[0] != 1 or ids.shape[0] != 1 or sc.shape[1] < n_tokens:
            return None
        now = ids.tobytes()
        prev = self._prev_bytes
        if prev is not None and len(now) == len(prev) + ids.itemsize and now.startswith(prev):
            self.cursors[0].advance(int(ids[0, -1]))
        else:
            self._start(input_ids)
        self._prev_ids = input_ids
        self._prev_bytes = now
        self._applier.apply_host_row(sc[0], self.cursors[0].mask(), n_tokens)
        return scores

    # -- reporting ---------------------------------------------------------------------------

    def in_block(self) -> list[bool]:
        """Per row: whether a block is open now."""
        return [c.in_block for c in self.cursors]

    def stats(self) -> dict[str, Any]:
        return {**self.grammar.stats(), "rows": len(self.cursors), "errors": sum(e is not None for e in self.errors)}


__all__ = ["ToolCallLogitsProcessor", "vocabulary_of"]
