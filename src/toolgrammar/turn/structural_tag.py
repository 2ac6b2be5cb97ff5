"""The turn grammar as an xgrammar *structural tag*: the structured-outputs route (vLLM, SGLang, xgrammar).

:func:`structural_tag` writes the turn policy (:func:`~toolgrammar.turn.policy.turn_policy`, the same one the
engine's grammar is lowered from) as a structural tag: free text until the block opener, then each
block exactly as toolgrammar's own block grammar spells it (names and arguments from the schemas, the
chat template's canonical JSON, no unbounded whitespace), tool choice (``none``: no opener;
``required``: at least one block; a name: that block straight away), parallel calls joined by the
format's separator, nothing after the last block (``after_calls="end"``), and the reasoning part as
``reasoning`` says. No toolgrammar code runs in the engine: the engine's own xgrammar enforces it,
which also makes it the route that works with speculative decoding and through
``extra_body={"structured_outputs": {"structural_tag": ...}}`` on any vLLM server
(:func:`toolgrammar.integrations.vllm.structured_outputs` wraps it for vLLM's ``SamplingParams``).

Shape (hermes, ``tool_choice="auto"``, parallel calls, ``reasoning="enabled"``)::

    or(seq(tag("<think>", any_text, "</think>"), CONTENT),
       seq("<think>", any_text(excludes=["</think>"])),            # the turn may end while thinking
       CONTENT)
    CONTENT = seq(any_text(excludes=["<tool_call>"]),
                  optional(tags_with_separator([BLOCK], "\\n", at_least_one=True)))
    BLOCK   = tag("<tool_call>", regex(<the block grammar between the markers>), "</tool_call>")

The tests check, option set by option set, that xgrammar accepts exactly the texts the turn grammar
accepts. What the policy says and a structural tag does not:

- **the token budget** (the policy's *safe* regions). xgrammar knows nothing of ``max_tokens``, so a
  block that is open when the budget runs out is cut (an unclosed, invalid call);
- a content that must not start with the think opener (the policy keeps "no reasoning" apart from
  "reasoning"): the tag omits it, a known and harmless difference: with ``reasoning="enabled"`` a turn
  that does not reason may still start with ``<think>`` (the strict parser then reads it as reasoning);
- free text that must not start with a word (``qwen-xml``'s bare ``<function=``), reasoning that a block
  opener ends without the closer, and "a string that does not contain X" inside a block
  (``escape_markers=True``, the raw-text values of ``qwen-xml``): xgrammar regexes have no lookahead, so
  these are refused with a :class:`~toolgrammar.errors.GrammarError` rather than loosened silently;
- a closer the format may write right before the end of the turn (``kimi-k3``'s ``<|close|>message<|sep|>``):
  refused the same way. A wrapped free text (``kimi-k3``'s response channel) is a ``tag``.

This module imports no torch, transformers, vLLM or xgrammar: the tag is plain JSON.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolgrammar.automata.nodes import Alt, Avoid, Group, Lit, Members, Node, NotPrefixed, Repeat, Seq, Shared, seq
from toolgrammar.automata.regex import to_regex
from toolgrammar.errors import GrammarError
from toolgrammar.turn import policy
from toolgrammar.turn.grammar import compile_turn

if TYPE_CHECKING:
    from toolgrammar.turn.grammar import TurnGrammar


def structural_tag(tools: Any, *, format: str = "hermes", mode: str = "schema", **options: Any) -> dict[str, Any]:
    """The turn grammar as an xgrammar structural tag (a JSON object; no vLLM or xgrammar import).

    Parameters are those of :func:`toolgrammar.turn.grammar.compile_turn`. The same object works wherever
    xgrammar structural tags are accepted (vLLM's ``structured_outputs.structural_tag``, SGLang,
    ``xgrammar.Grammar.from_structural_tag``). See the module docstring for its shape and for what it
    cannot carry.
    """
    turn = compile_turn(tools, mode=mode, format=format, **options)
    return turn_structural_tag(turn)


def turn_structural_tag(turn: TurnGrammar) -> dict[str, Any]:
    """:func:`structural_tag` of an already compiled :class:`~toolgrammar.turn.grammar.TurnGrammar`."""
    turn_policy = policy.turn_policy(turn.tools, turn.options, turn.format)
    _refuse_unsayable(turn_policy)
    return _tag_root(_TagLowering(turn_policy.format)(turn_policy.turn))


def _refuse_unsayable(turn_policy: policy.TurnPolicy) -> None:
    """Refuse, in this order, the format's free text and reasoning where a structural tag cannot say them.

    Checked for the whole policy before anything is lowered (the blocks' own refusal comes while
    lowering them), so a policy that has several of these always gets the same message.
    """
    if turn_policy.text.not_prefixed:  # the format's free text, whether or not this turn holds any
        raise _not_prefixed_error(turn_policy.format, turn_policy.text.not_prefixed)
    for part in turn_policy.parts():
        if isinstance(part, policy.End) and part.before is not None:
            raise _turn_close_error(turn_policy.format, part.before)
        if isinstance(part, policy.Reasoning) and part.ends_at_block:
            raise GrammarError(
                f"the structured-outputs route cannot carry the {turn_policy.format!r} format's reasoning, which a "
                "block may end without the closing think marker; pass reasoning='disabled' or use the logits "
                "processor (toolgrammar.integrations.vllm.VllmToolCallLogitsProcessor)"
            )


def _turn_close_error(format_name: str, before: str) -> GrammarError:
    return GrammarError(
        f"the structured-outputs route cannot carry the {format_name!r} format: it may write {before!r} right "
        "before the end of the turn, which a structural tag (whose end is the turn's end) cannot say; use the "
        "logits processor (toolgrammar.vllm.VllmToolCallLogitsProcessor) or the GBNF/lark exports"
    )


def _not_prefixed_error(format_name: str, word: str) -> GrammarError:
    return GrammarError(
        f"the structured-outputs route cannot carry the {format_name!r} format: its free text must not start with "
        f"{word!r}, which needs a lookahead that xgrammar does not support; use the logits processor "
        "(toolgrammar.integrations.vllm.VllmToolCallLogitsProcessor)"
    )


class _TagLowering(policy.Lowering["dict[str, Any] | None"]):
    """A turn policy as a structural tag's format. The end of the turn lowers to ``None`` (nothing: the
    tag ends where the turn ends), so ``OneOf((x, END))`` is ``optional(x)``; *safe* is not said."""

    def __init__(self, format_name: str) -> None:
        super().__init__()
        self.format_name = format_name

    def free_text(self, part: policy.FreeText) -> dict[str, Any]:
        if part.not_prefixed:
            raise _not_prefixed_error(self.format_name, part.not_prefixed)
        if part.wrapper is None:
            return _any_text(*part.avoid)
        opener, closer = part.wrapper
        words = [w for w in part.avoid if w != closer]  # a tag's content never runs past its end
        wrapped = {"type": "tag", "begin": opener, "content": _any_text(*words), "end": closer}
        return wrapped if not opener else {"type": "optional", "content": wrapped}  # an empty run may be left out

    def reasoning(self, part: policy.Reasoning) -> dict[str, Any]:
        # part.ends_at_block (and with it part.unclosed_then) was refused by _refuse_unsayable.
        begin = part.opener or ""
        words = [w for w in part.avoid if w != part.closer]  # a tag's content never runs past its end
        thought = {"type": "tag", "begin": begin, "content": _any_text(*words), "end": part.closer}
        branches = [_sequence(thought, self._some(part.then))]
        if part.may_stop:  # the turn may end (or be cut) while thinking
            unfinished = _any_text(part.closer, *words)
            branches.append(_sequence({"type": "const_string", "value": begin}, unfinished) if begin else unfinished)
        return branches[0] if len(branches) == 1 else {"type": "or", "elements": branches}

    def blocks(self, part: policy.Blocks) -> dict[str, Any]:
        block = _block_tag(part.block, part.opener, part.closer)
        if not part.parallel:
            return block
        return {"type": "tags_with_separator", "tags": [block], "separator": part.separator, "at_least_one": True}

    def sequence(self, part: policy.Sequence) -> dict[str, Any] | None:
        elements = [e for e in (self(item) for item in part.items) if e is not None]
        return _sequence(*elements) if elements else None

    def one_of(self, part: policy.OneOf) -> dict[str, Any] | None:
        elements: list[dict[str, Any]] = []
        may_end = False
        for item in part.items:
            got = self(item)
            if got is None:
                may_end = True
            elif got["type"] == "or":
                elements.extend(got["elements"])
            else:
                elements.append(got)
        if not elements:
            return None
        either = elements[0] if len(elements) == 1 else {"type": "or", "elements": elements}
        return {"type": "optional", "content": either} if may_end else either

    def newlines(self, part: policy.Newlines) -> dict[str, Any]:
        return {"type": "regex", "pattern": f"\\n{{{part.lo},{part.hi}}}"}

    def end(self, part: policy.End) -> None:
        if part.before is not None:  # refused by _refuse_unsayable first
            raise _turn_close_error(self.format_name, part.before)
        return None

    def not_starting_with(self, part: policy.NotStartingWith) -> dict[str, Any] | None:
        return self(part.item)  # not said (see the module docstring): harmless, the parser reads it as reasoning

    def _some(self, part: policy.Part) -> dict[str, Any]:
        got = self(part)
        if got is None:
            raise GrammarError("a structural tag cannot say an empty turn part")
        return got


def _tag_root(fmt: dict[str, Any] | None) -> dict[str, Any]:
    if fmt is None:
        raise GrammarError("a structural tag cannot say an empty turn")
    return {"type": "structural_tag", "format": fmt}


def _any_text(*excludes: str) -> dict[str, Any]:
    return {"type": "any_text", "excludes": list(dict.fromkeys(e for e in excludes if e))}


def _sequence(*elements: dict[str, Any]) -> dict[str, Any]:
    return elements[0] if len(elements) == 1 else {"type": "sequence", "elements": list(elements)}


def _block_tag(block: Node, opener: str, closer: str) -> dict[str, Any]:
    """One block as ``tag(opener, regex(middle), closer)``: the format's block grammar between its markers."""
    middle = _strip_markers(block, opener, closer)
    lookaround = _find_lookaround(middle)
    if lookaround is not None:
        raise GrammarError(
            f"the structured-outputs route cannot carry this grammar: a block holds {lookaround}, which needs a "
            "regex lookahead that xgrammar does not support (escape_markers=True, or a format with raw-text "
            "values such as qwen-xml); use the logits processor (toolgrammar.vllm.VllmToolCallLogitsProcessor)"
        )
    return {
        "type": "tag",
        "begin": opener,
        "content": {"type": "regex", "pattern": xgrammar_regex(to_regex(middle))},
        "end": closer,
    }


def _strip_markers(block: Node, opener: str, closer: str) -> Node:
    ob, cb = opener.encode(), closer.encode()
    items = list(block.items) if isinstance(block, Seq) else [block]
    first, last = items[0], items[-1]
    if len(items) == 1 and isinstance(first, Lit) and first.data.startswith(ob) and first.data.endswith(cb):
        data = first.data[len(ob) :]
        return Lit(data[: len(data) - len(cb)])
    if not (isinstance(first, Lit) and first.data.startswith(ob) and isinstance(last, Lit) and last.data.endswith(cb)):
        raise GrammarError(
            f"the format's block grammar does not start with {opener!r} and end with {closer!r} as literals; "
            "the structured-outputs route needs that shape (see ToolCallFormat.block_grammar)"
        )
    items[0] = Lit(first.data[len(ob) :])
    items[-1] = Lit(last.data[: len(last.data) - len(cb)])
    return seq(*items)


def _find_lookaround(node: Node) -> str | None:
    """The first construct whose regex needs a lookahead, described for an error message; None if none."""
    stack = [node]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Avoid):
            words = ", ".join(repr(w.decode("utf-8", "replace")) for w in n.words)
            return f"text that must avoid {words}"
        if isinstance(n, NotPrefixed):
            return f"text that must not start with {n.word.decode('utf-8', 'replace')!r}"
        if isinstance(n, (Seq, Alt)):
            stack.extend(n.items)
        elif isinstance(n, (Repeat, Shared, Group)):
            stack.append(n.item)
        elif isinstance(n, Members):
            stack.extend(item for item, _ in n.items)
            stack.append(n.sep)
    return None


_ESCAPES = {"\n": r"\n", "\t": r"\t", "\r": r"\r", "\x0b": r"\v", "\x0c": r"\f"}


def xgrammar_regex(pattern: str) -> str:
    """Rewrite a Python ``re`` pattern (as :func:`~toolgrammar.automata.regex.to_regex` prints it) for xgrammar.

    ``re.escape`` escapes characters that xgrammar's regex parser does not know as escapes (space,
    ``#``, ``&``, ``~``, a raw newline after a backslash...): xgrammar matches them literally but logs
    a warning per occurrence, on every request. This spells them plainly (control characters as
    ``\\n``, ``\\t``, ``\\xNN``); everything else is kept as it is.
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt in " #&~'%,;:<>=!@`":
                out.append(nxt)
            elif nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
            elif ord(nxt) < 0x20:
                out.append(f"\\x{ord(nxt):02x}")
            else:
                out.append(c + nxt)
            i += 2
            continue
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
        i += 1
    return "".join(out)


__all__ = ["structural_tag", "turn_structural_tag", "xgrammar_regex"]
