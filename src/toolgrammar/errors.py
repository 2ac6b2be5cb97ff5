"""The exception classes of toolgrammar (and the one warning class, :class:`ToolSchemaWarning`).

One base class, :class:`ToolgrammarError`, so callers can catch everything the package raises on
bad input with one ``except``. Every message names what is wrong, where, and (when there is one)
the fix. Grammar violations during generation are *not* exceptions: the engine masks them, and the
strict parser reports them as :class:`toolgrammar.turn.parser.CallError` values.
"""

from __future__ import annotations


class ToolgrammarError(Exception):
    """Base class of every error toolgrammar raises on bad input."""


class ToolSchemaError(ToolgrammarError, ValueError):
    """A tool list or one tool's schema cannot be compiled.

    Attributes
    ----------
    tool : str | None
        The tool's name (or ``"#<index>"`` when it has no usable name).
    pointer : str
        JSON pointer of the offending node, relative to the tool's ``parameters``
        (``""`` for the tool entry itself).
    keyword : str | None
        The JSON Schema keyword at fault, when one is.
    """

    def __init__(self, message: str, *, tool: str | None = None, pointer: str = "", keyword: str | None = None):
        where = []
        if tool is not None:
            where.append(f"tool {tool!r}")
        if pointer:
            where.append(f"at {pointer}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)
        self.tool = tool
        self.pointer = pointer
        self.keyword = keyword


class SchemaTooLargeError(ToolSchemaError):
    """A part of a tool's schema whose automaton would be too large to build in reasonable time and memory.

    Raised before any automaton is built, from :func:`toolgrammar.automata.size.estimate_size`; ``pointer``
    names the smallest part over the limit and the message says what would make it fit.

    Attributes (besides :class:`ToolSchemaError`'s)
    -----------------------------------------------
    estimate : int
        The part's estimated size.
    limit : int
        :data:`toolgrammar.automata.size.MAX_ESTIMATED_SIZE`.
    """

    def __init__(self, message: str, *, tool: str | None, pointer: str, keyword: str | None, estimate: int, limit: int):
        super().__init__(message, tool=tool, pointer=pointer, keyword=keyword)
        self.estimate = estimate
        self.limit = limit


class ToolSchemaWarning(UserWarning):
    """A rewrite or a dropped keyword of ``load_tools(..., lenient=True)``: the message names the tool,
    the JSON pointer and what was done (the strict default refuses instead)."""


class GrammarError(ToolgrammarError, ValueError):
    """Options or a tool set that the grammar compiler rejects (bad tool_choice, unknown format...)."""


class TokenizerError(ToolgrammarError, ValueError):
    """A tokenizer that cannot carry a format (missing markers, unknown byte encoding...)."""


class ProcessorError(ToolgrammarError, RuntimeError):
    """Misuse of a logits processor (wrong shapes, beams, a generate() call it was not built for)."""


class TokenBudgetWarning(UserWarning):
    """A :class:`ToolCallLogitsProcessor`'s ``max_new_tokens`` disagrees with the generation it serves.

    The processor closes every block within its own budget; only generate's budget decides where
    the turn is cut. The message names both numbers and the fix.

    What is detected, once per generation: under transformers' ``generate``, whose budget is read
    from its generation loop at the first step, any difference between that budget and
    ``max_new_tokens``, and a processor built without one (unless ``tool_choice="none"``).
    Elsewhere (a hand-written loop, or a transformers whose loop cannot be read): a processor
    without a budget under a policy that forces a call, and a generation that asks for more tokens
    than ``max_new_tokens`` while a row is still writing its turn (warned at that step).

    What cannot be: a generation stopped early by anything but its length limit (generate's own
    ``stop_strings``, ``max_time``, a stopping criterion of your own) or by the shorter budget of a
    loop that cannot be read. (Stops given to the processor, ``stop_strings`` and ``stop_token_ids``,
    end the turn only where it may end: they cut nothing.) A logits processor is called with the
    input ids and the scores only; it never sees the step that does not come.
    """
