"""toolgrammar's row in ``bench/anchors.py``: the transformers ``ToolCallLogitsProcessor``, as ``generate`` drives it.

The processor is measured whole, exactly as ``model.generate`` calls it: ``proc(input_ids, scores)`` with
the sequence so far (prompt included) and a fresh scores tensor. That one call finds the row's state
from ``input_ids`` (a new generation on the first call, then one new token per call), looks up (or, on
a first visit, computes) the state's mask, masks the logit columns beyond the tokenizer and applies the
mask in place. There is no separate accept: the next call reads the token from ``input_ids``.

What the harness's columns mean for this row:

- *tokenizer setup*: ``vocabulary_of(tokenizer)`` + ``token_table(vocab)``, built once per tokenizer
  (like llguidance's ``LLTokenizer``); never part of a "new tool set" cold start.
- *compile*: building the processor for a tool set nobody compiled before in this process or on disk
  (tool validation, the turn automaton, the budget bound): :meth:`fresh` empties the in-memory caches
  and points ``TOOLGRAMMAR_CACHE`` at a new empty folder. The processor compiles the grammar of the
  whole turn (reasoning, free text, any number of blocks, end of turn), not just one block.
- *mask*: the whole processor call, steady state (masks already cached: two warm-up walks).
- *first visit*: the same call on the first walk after a cold compile (masks computed on first visit).
- *compute*: ``Cursor.mask()`` alone (the cached mask lookup): what the processor does besides applying.
- *accept*: ``Cursor.advance(token)`` on a side cursor; the processor does the same inside *mask*.
- *batch 64*: one processor call on a (64, L) batch whose rows have reached different positions of the
  block, after the processor followed every row token by token (so each row's cursor is where
  ``generate`` would have left it). Before each timed call the cursors are restored, untimed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from common import BenchContext, EngineRunner, ToolSet

MAX_NEW_TOKENS = 512
"""The budget given to the processor (the same number ``generate`` would get): the budget check runs on
every step, and a 49-token call is far from the budget, so no budget-specific masks are built."""


@dataclass
class _State:
    proc: Any
    cursor: Any
    tokens: list[int] = field(default_factory=list)


class ToolgrammarRunner(EngineRunner):
    name = "toolgrammar"
    compile_reps = 5  # cold compiles, each followed by a first-visit walk

    def unavailable(self) -> str | None:
        import importlib.util

        return None if importlib.util.find_spec("toolgrammar") else "toolgrammar is not installed"

    # -- the contract ------------------------------------------------------------------------------

    def setup(self, ctx: BenchContext) -> None:
        import importlib.metadata

        from toolgrammar.integrations.hf import ToolCallLogitsProcessor, vocabulary_of
        from toolgrammar.runtime.cursor import Cursor
        from toolgrammar.runtime.token_table import token_table

        self.name = f"toolgrammar {importlib.metadata.version('toolgrammar')}"
        self.Processor = ToolCallLogitsProcessor
        self.Cursor = Cursor
        self.tokenizer = ctx.tokenizer
        self.columns = ctx.columns
        self._root = tempfile.mkdtemp(prefix="toolgrammar-bench-")
        self._n = 0
        self.fresh()  # an empty on-disk cache from the start: nothing of an earlier run is reused
        # Per tokenizer, once (not part of a tool set's cold start): the vocabulary and its token table.
        self.vocab = vocabulary_of(ctx.tokenizer)
        token_table(self.vocab)

    def fresh(self, keep: tuple[str, ...] = ()) -> None:
        """Forget every compiled tool set: in memory (``toolgrammar.caches.clear`` of every scope: grammars,
        validated tools, schema trees, shared sub-automata, tool tails, the turn skeletons, which do not depend
        on the tools; and the token table's text-state exits, which depend on the tokenizer alone; except the
        caches named in ``keep``) and on disk (a new, empty ``TOOLGRAMMAR_CACHE`` folder)."""
        from toolgrammar import caches

        self._n += 1
        os.environ["TOOLGRAMMAR_CACHE"] = os.path.join(self._root, f"cache-{self._n}")
        caches.clear(scope=None, keep=keep)

    def forget_memory(self) -> None:
        """Drop the in-memory caches only (the on-disk cache stays): a fresh process, tokenizer aside."""
        from toolgrammar import caches

        caches.clear(scope=None)

    def compile(self, toolset: ToolSet) -> Any:
        return self.Processor(self.tokenizer, toolset.tools, max_new_tokens=MAX_NEW_TOKENS)

    def start(self, compiled: Any) -> Any:
        # No reset(): the processor recognises a new generation by itself (the first call's input does
        # not extend the previous call's by one token), as it must inside generate().
        return _State(compiled, self.Cursor(compiled.grammar, MAX_NEW_TOKENS))

    def mask(self, state: Any, scores: torch.Tensor, input_ids: torch.Tensor) -> None:
        state.proc(input_ids, scores)

    def accept(self, state: Any, token_id: int) -> None:
        state.cursor.advance(token_id)
        state.tokens.append(token_id)

    def fill(self, state: Any) -> bool:
        state.cursor.mask()
        return True

    def compiled_bytes(self, compiled: Any) -> int | None:
        return int(compiled.grammar.cache_bytes)

    # -- batch 64 ----------------------------------------------------------------------------------

    def batch_prepare(self, states: Sequence[Any], input_ids: torch.Tensor) -> None:
        """Walk a batch processor to the harness's rows, one token per step for every row.

        Row ``j`` is at block position ``p_j`` (``len(states[j].tokens)``). All rows must grow by one
        token per step, so row ``j`` writes ``max(p) - p_j`` filler tokens of free text first, then its
        ``p_j`` block tokens: at the last step every row is where the harness put it.
        """
        from toolgrammar.vocab import qwen3_vocabulary

        proc0 = states[0].proc
        self.bproc = self.Processor(self.tokenizer, proc0.turn_grammar.tools, max_new_tokens=MAX_NEW_TOKENS)
        assert self.bproc.grammar is proc0.grammar  # shared: its masks are already cached
        pad = 151643
        rows = input_ids.tolist()
        prompts, blocks = [], []
        for row, st in zip(rows, states, strict=True):
            k = len(st.tokens)
            body = [t for t in row]
            while body and body[0] == pad:
                body.pop(0)
            prompts.append(body[: len(body) - k])
            blocks.append(body[len(body) - k :])
        if len({tuple(p) for p in prompts}) != 1:
            raise RuntimeError("batch rows do not share one prompt")
        filler = qwen3_vocabulary().token_id(b" ok")
        g = max(map(len, blocks))
        seqs = [prompts[0] + [filler] * (g - len(b)) + b for b in blocks]
        full = torch.tensor(seqs)
        p = len(prompts[0])
        scratch = torch.empty(len(seqs), self.columns)
        for step in range(g):
            self.bproc(full[:, : p + step], scratch)
        self._bfull = full[:, : p + g]
        self._bprev = full[:, : p + g - 1]
        self._bsnap = [c.fork() for c in self.bproc.cursors]
        self._bprev_ids = self.bproc._prev_ids
        self._bwindows = ([list(w) for w in self.bproc._windows], self.bproc._tail_len)
        self.bproc(self._bfull, scratch)  # the timed step, once: every row must be where the harness put it
        for c, st in zip(self.bproc.cursors, states, strict=True):
            if c.state != st.cursor.state or not c.in_block:
                raise RuntimeError("batch processor and harness disagree on a row's state")
        self.batch_before()

    def batch_before(self) -> None:
        """Untimed: put every row's cursor back where it was before the timed step."""
        self.bproc.cursors = [c.fork() for c in self._bsnap]
        self.bproc._prev_ids = self._bprev_ids
        self.bproc._windows = [list(w) for w in self._bwindows[0]]
        self.bproc._tail_len = self._bwindows[1]

    def batch_mask(self, states: Sequence[Any], scores: torch.Tensor, input_ids: torch.Tensor) -> bool:
        """One decode step (the harness calls :meth:`batch_prepare` once and :meth:`batch_before` before each)."""
        self.bproc(self._bfull, scores)
        return True

    def cleanup(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
