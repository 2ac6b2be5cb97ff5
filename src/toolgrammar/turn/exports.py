"""The turn grammar for engines that cannot load Python: GBNF, lark (llguidance) and the structural tag.

The turn policy (:func:`~toolgrammar.turn.policy.turn_policy`, the same one the engine's grammar and the
structural tag are lowered from) is lowered once more, part by part, into a small grammar of named
rules, which is printed in two syntaxes:

- **GBNF** (:func:`to_gbnf`): llama.cpp's grammar syntax (``llama-cli --grammar-file``, Ollama,
  llama-cpp-python's ``LlamaGrammar.from_string``). xgrammar's EBNF reader reads it too
  (``xgrammar.Grammar.from_ebnf``). The constructs used: ``root ::= ...``, rule names of lowercase
  letters, digits and ``-``, double-quoted strings with the escapes ``\\"``, ``\\\\``, ``\\n``, ``\\r``,
  ``\\t``, ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH`` (every character outside printable ASCII is escaped),
  character classes ``[...]`` and ``[^...]`` with ranges and the same escapes (``-`` and ``^`` written
  ``\\x2D`` and ``\\x5E``, ``[`` and ``]`` as ``\\[`` and ``\\]``), grouping ``( )``, alternation ``|``,
  ``*``, ``+``, ``?`` and ``{m,n}``/``{m,}``/``{m}``, and ``#`` comments; one rule per line.
- **lark** (:func:`to_lark`), as llguidance reads it (``LLMatcher.grammar_from_lark``; vLLM and SGLang
  pass it through with their llguidance backend). llguidance's lexer is greedy and does not back up:
  a rule made of lexemes ``FREE_TEXT "<tool_call>" ...`` would let the free text swallow ``<tool_call``
  and then fail. So every rule is a *terminal* (uppercase, compiled into one regular expression) and the
  grammar is ``start: TURN``: one lexeme, exactly the turn's language. Strings are JSON-quoted
  (``ensure_ascii``); character classes are ``/[...]/`` in Rust regex syntax (``\\x{H..}`` escapes).
- **the structural tag** (:func:`to_structural_tag`): :func:`toolgrammar.turn.structural_tag.turn_structural_tag`
  as JSON, for xgrammar, vLLM and SGLang; it refuses what it cannot say (see that module).

The policy's structure (free text, reasoning, blocks joined by the separator, the end of the turn)
becomes named rules (``reasoning``, ``content``, ``calls``...; one rule per part object that appears in
several places). The leaves (free text avoiding words, reasoning text, one block) come from
:func:`~toolgrammar.automata.portable_regex.to_portable_regex` of their node (the same language, no lookaround),
parsed by Python's own regex parser (``re._parser``) and turned into rule expressions: literal runs
become strings, classes become character classes, alternation, repetition and groups stay what they are,
and ``$`` (the end of the turn) is the empty text, since the end of the turn ends every branch it is
in. The output is linear in the size of those regexes. "Does not start with ``<think>``" is pushed into
the first leaf of a part (as :mod:`toolgrammar.automata.portable_regex` does). Like the regexes, the exports
describe the turn's *text*: control tokens are not part of it and the end of the grammar is the end
of the turn; the token budget (the policy's *safe* regions) is not said.

Golden files (``grammars/<format>/<policy>.{gbnf,lark,structural-tag.json}`` at the top of the
repository: the bundled tools under a few policies, see :data:`POLICIES`) are written by ONE command::

    python -m toolgrammar.exports write grammars/

and ``python -m toolgrammar.exports check grammars/`` (and ``tests/turn/test_exports.py``) compares them
with what the code writes now.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from toolgrammar.automata.nodes import ANY_TEXT_SYMBOL, Node, avoiding, not_prefixed, seq, star
from toolgrammar.automata.portable_regex import push_not_prefixed, to_portable_regex
from toolgrammar.bundled import bundled_tools_path
from toolgrammar.errors import GrammarError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.formats.options import options_from_kwargs
from toolgrammar.schema import load_tools
from toolgrammar.turn import policy
from toolgrammar.turn.grammar import NodeLowering, free_text_node
from toolgrammar.turn.structural_tag import turn_structural_tag

if TYPE_CHECKING:
    from toolgrammar.formats.base import ToolCallFormat
    from toolgrammar.formats.options import GrammarOptions
    from toolgrammar.schema import ToolSet
    from toolgrammar.turn.grammar import TurnGrammar

try:  # Python 3.11+
    from re import _constants as _sre_c
    from re import _parser as _sre
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c  # type: ignore[no-redef]
    import sre_parse as _sre  # type: ignore[no-redef]

__all__ = [
    "EXPORTS",
    "POLICIES",
    "export",
    "golden_files",
    "to_gbnf",
    "to_lark",
    "to_structural_tag",
    "write_golden",
]

EXPORTS = ("gbnf", "lark", "structural-tag")
"""The names of the exports (``toolgrammar grammar --export NAME``)."""

SUFFIXES = {"gbnf": ".gbnf", "lark": ".lark", "structural-tag": ".structural-tag.json"}
"""The file name ending of each export in ``grammars/<format>/``."""

POLICIES: dict[str, dict[str, Any]] = {
    "default": {},
    "required": {"tool_choice": "required"},
    "reasoning-disabled": {"reasoning": "disabled"},
}
"""The policies of the golden files: name -> grammar options (on top of the defaults)."""

_MAX_CP = 0x10FFFF
_SURROGATES = (0xD800, 0xDFFF)


# -- the rule grammar ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Str:
    """A literal string (never empty)."""

    text: str


@dataclass(frozen=True)
class Cls:
    """A character class: sorted, disjoint, non-adjacent code point ranges (surrogates are "don't care")."""

    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Ref:
    """A reference to a named rule."""

    name: str


@dataclass(frozen=True)
class Cat:
    """Expressions one after the other; ``Cat(())`` is the empty text."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    """Alternatives (two or more, none empty)."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Rep:
    """``lo`` to ``hi`` (``None``: unbounded) repetitions of an expression."""

    item: Expr
    lo: int
    hi: int | None


Expr = Str | Cls | Ref | Cat | Or | Rep
EMPTY = Cat(())


def _cat(*items: Expr) -> Expr:
    flat: list[Expr] = []
    for it in items:
        for sub in it.items if isinstance(it, Cat) else (it,):
            if isinstance(sub, Str) and flat and isinstance(flat[-1], Str):
                flat[-1] = Str(flat[-1].text + sub.text)
            else:
                flat.append(sub)
    return flat[0] if len(flat) == 1 else Cat(tuple(flat))


def _or(*items: Expr) -> Expr:
    """Alternatives; an empty one makes the rest optional (``(a | b)?``)."""
    flat: list[Expr] = []
    nullable = False
    for it in items:
        for sub in it.items if isinstance(it, Or) else (it,):
            if sub == EMPTY:
                nullable = True
            elif sub not in flat:
                flat.append(sub)
    if not flat:
        return EMPTY
    body = flat[0] if len(flat) == 1 else Or(tuple(flat))
    return _rep(body, 0, 1) if nullable else body


def _rep(item: Expr, lo: int, hi: int | None) -> Expr:
    if item == EMPTY or hi == 0:
        return EMPTY
    if (lo, hi) == (1, 1):
        return item
    if isinstance(item, Rep) and (lo, hi) == (0, 1) and item.lo in (0, 1):
        return Rep(item.item, 0, item.hi)  # (x*)? is x*, (x+)? is x*, (x?)? is x?
    return Rep(item, lo, hi)


@dataclass
class RuleGrammar:
    """Named rules in definition order; :attr:`root` is the whole turn."""

    root: Expr
    rules: dict[str, Expr]
    header: tuple[str, ...] = ()
    """Comment lines (what the grammar is, how it was made)."""


# -- regex (Python syntax, no lookaround) -> expression ---------------------------------------------

_CATEGORY_CACHE: dict[Any, tuple[tuple[int, int], ...]] = {}


def _category(cat: Any) -> tuple[tuple[int, int], ...]:
    """The code points Python's ``re`` puts in a class escape (``\\s``, ``\\d``, ``\\w`` and negations)."""
    got = _CATEGORY_CACHE.get(cat)
    if got is None:
        names = {
            _sre_c.CATEGORY_SPACE: r"\s",
            _sre_c.CATEGORY_NOT_SPACE: r"\S",
            _sre_c.CATEGORY_DIGIT: r"\d",
            _sre_c.CATEGORY_NOT_DIGIT: r"\D",
            _sre_c.CATEGORY_WORD: r"\w",
            _sre_c.CATEGORY_NOT_WORD: r"\W",
        }
        if cat not in names:
            raise GrammarError(f"cannot export the regex class escape {cat}")
        pattern = re.compile(names[cat])
        spans: list[tuple[int, int]] = []
        for cp in range(_MAX_CP + 1):
            if _SURROGATES[0] <= cp <= _SURROGATES[1] or not pattern.fullmatch(chr(cp)):
                continue
            spans.append((cp, cp))
        got = _CATEGORY_CACHE[cat] = _normalize(spans)
    return got


def _normalize(spans: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sorted, merged ranges; two ranges that only the surrogates separate are one."""
    merged: list[list[int]] = []
    for a, z in sorted(spans):
        if merged and (a <= merged[-1][1] + 1 or (merged[-1][1] == _SURROGATES[0] - 1 and a == _SURROGATES[1] + 1)):
            merged[-1][1] = max(merged[-1][1], z)
        else:
            merged.append([a, z])
    return tuple((a, z) for a, z in merged)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Every code point (surrogates aside) not in ``ranges``."""
    out: list[tuple[int, int]] = []
    at = 0
    for a, z in ranges:
        if a > at:
            out.append((at, a - 1))
        at = z + 1
    if at <= _MAX_CP:
        out.append((at, _MAX_CP))
    # Drop what lies wholly among the surrogates; trim ranges that start or end inside them.
    kept = []
    for a, z in out:
        if _SURROGATES[0] <= a and z <= _SURROGATES[1]:
            continue
        if _SURROGATES[0] <= a <= _SURROGATES[1]:
            a = _SURROGATES[1] + 1
        if _SURROGATES[0] <= z <= _SURROGATES[1]:
            z = _SURROGATES[0] - 1
        kept.append((a, z))
    return _normalize(kept)


def _class_of(items: list[tuple[Any, Any]]) -> Cls:
    spans: list[tuple[int, int]] = []
    negate = False
    for op, av in items:
        if op is _sre_c.NEGATE:
            negate = True
        elif op is _sre_c.LITERAL:
            spans.append((av, av))
        elif op is _sre_c.RANGE:
            spans.append(av)
        elif op is _sre_c.CATEGORY:
            spans.extend(_category(av))
        else:
            raise GrammarError(f"cannot export the regex class item {op}")
    ranges = _normalize(spans)
    return Cls(_complement(ranges) if negate else ranges)


def regex_expr(pattern: str) -> Expr:
    """A Python regex without lookaround (:func:`~toolgrammar.automata.portable_regex.to_portable_regex`) as an
    expression. ``$`` is the empty text: it marks the end of the turn, which ends every branch it is in."""
    try:
        parsed = _sre.parse(pattern)
    except re.error as error:  # pragma: no cover - our own regexes parse
        raise GrammarError(f"cannot parse the regex to export: {error}") from error
    if parsed.state.flags & (re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE):
        raise GrammarError("cannot export a regex with flags")
    return _sub(parsed)


def _sub(parsed: Any) -> Expr:
    items: list[Expr] = []
    for op, av in parsed:
        if op is _sre_c.LITERAL:
            items.append(Str(chr(av)))
        elif op is _sre_c.NOT_LITERAL:
            items.append(Cls(_complement(((av, av),))))
        elif op is _sre_c.ANY:  # without DOTALL: any character but a newline
            items.append(Cls(_complement(((10, 10),))))
        elif op is _sre_c.IN:
            items.append(_class_of(av))
        elif op is _sre_c.BRANCH:
            items.append(_or(*(_sub(branch) for branch in av[1])))
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT):
            lo, hi, body = av
            items.append(_rep(_sub(body), lo, None if hi is _sre_c.MAXREPEAT else hi))
        elif op is _sre_c.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if add_flags or del_flags:
                raise GrammarError("cannot export a regex group with inline flags")
            items.append(_sub(body))
        elif op is _sre_c.AT and av in (_sre_c.AT_END, _sre_c.AT_END_STRING):
            items.append(EMPTY)  # the end of the turn
        else:
            raise GrammarError(f"cannot export the regex construct {op} {av!r}")
    return _cat(*items)


# -- policy -> rule grammar ----------------------------------------------------------------------


class _RuleLowering(policy.Lowering[Expr]):
    """A turn policy as named rules. The end of the turn is the empty text (it ends every branch)."""

    def __init__(self, turn_policy: policy.TurnPolicy) -> None:
        super().__init__()

        self.rules: dict[str, Expr] = {}
        self._by_body: dict[Expr, str] = {}
        self._nodes = NodeLowering()
        self._parents: dict[int, int] = {}
        for part in turn_policy.parts():
            for child in policy.children(part):
                self._parents[id(child)] = self._parents.get(id(child), 0) + 1

    # naming --------------------------------------------------------------------------------------

    def _rule(self, base: str, body: Expr) -> Expr:
        """A named rule for ``body`` (one rule per distinct body: equal leaves share it)."""
        if isinstance(body, (Ref, Str)) or body == EMPTY:
            return body
        name = self._by_body.get(body)
        if name is None:
            name, k = base, 1
            while name in self.rules:
                k += 1
                name = f"{base}-{k}"
            self.rules[name] = body
            self._by_body[body] = name
        return Ref(name)

    def _leaf(self, base: str, node: Node) -> Expr:
        return self._rule(base, regex_expr(to_portable_regex(node)))

    def _shared(self, part: policy.Part, base: str, body: Expr) -> Expr:
        """A rule when the part object appears in several places; else the expression inline."""
        return self._rule(base, body) if self._parents.get(id(part), 0) > 1 else body

    # the parts -----------------------------------------------------------------------------------

    def free_text(self, part: policy.FreeText) -> Expr:
        if part.wrapper is None:
            return self._leaf("free-text", self._nodes(part))

        opener, closer = part.wrapper
        text = _cat(self._leaf("free-text", free_text_node(part)), Str(closer))
        return text if not opener else _or(_cat(Str(opener), text), EMPTY)  # an empty run may be left out

    def reasoning(self, part: policy.Reasoning) -> Expr:
        think = avoiding(star(ANY_TEXT_SYMBOL), *part.avoid)  # as the engine's lowering spells it
        endings = [_cat(Str(part.closer), self(part.then))]
        if part.unclosed_then is not None:
            endings.append(self(part.unclosed_then))
        if part.may_stop:
            endings.append(EMPTY)
        body = _cat(self._leaf("think-text", think), _or(*endings))
        if part.opener is not None:
            body = _cat(Str(part.opener), body)
        return self._rule("reasoning", body)

    def blocks(self, part: policy.Blocks) -> Expr:
        block = self._leaf("block", part.block)
        body = _cat(block, _rep(_cat(Str(part.separator), block), 0, None)) if part.parallel else block
        return self._rule("blocks", body)

    def sequence(self, part: policy.Sequence) -> Expr:
        body = _cat(*(self(item) for item in part.items))
        first = part.items[0] if part.items else None
        return self._shared(part, "calls" if isinstance(first, policy.Blocks) else "content", body)

    def one_of(self, part: policy.OneOf) -> Expr:
        return self._shared(part, "either", _or(*(self(item) for item in part.items)))

    def newlines(self, part: policy.Newlines) -> Expr:
        return _rep(Str("\n"), part.lo, part.hi)

    def end(self, part: policy.End) -> Expr:
        return EMPTY if part.before is None else _rep(Str(part.before), 0, 1)

    def not_starting_with(self, part: policy.NotStartingWith) -> Expr:
        got = self._pushed(part.item, part.word.encode())
        if got is None:
            raise GrammarError(f"every text of this part starts with {part.word!r}: it accepts nothing")
        return self._shared(part, "content", got)

    def _pushed(self, part: policy.Part, word: bytes) -> Expr | None:
        """The texts of ``part`` that do not start with ``word`` (``None``: none), pushed into its first leaf."""
        node = self._nodes(part)
        pushed = push_not_prefixed(node, word)
        if pushed is node:
            return self(part)  # no text of it starts with the word
        if pushed is None:
            return None
        if isinstance(part, policy.OneOf):
            kept = [p for p in (self._pushed(item, word) for item in part.items) if p is not None]
            return _or(*kept) if kept else None
        if isinstance(part, policy.Sequence) and part.items:
            head, rest = part.items[0], part.items[1:]
            rest_node = seq(*(self._nodes(item) for item in rest))
            # Exact when no text of the rest continues a proper prefix of the word (as portable_regex's push).
            if all(push_not_prefixed(rest_node, word[k:]) is rest_node for k in range(len(word))):
                head_expr = self._pushed(head, word)
                return None if head_expr is None else _cat(head_expr, *(self(item) for item in rest))
        base = "free-text" if isinstance(part, policy.FreeText) else "content"
        return self._leaf(base, not_prefixed(node, word))


class _Compiled(Protocol):
    """What the exports read of a :class:`~toolgrammar.turn.grammar.TurnGrammar` (no automaton needed)."""

    tools: ToolSet
    options: GrammarOptions

    @property
    def format(self) -> ToolCallFormat: ...


@dataclass(frozen=True)
class _Spec:
    """Tools, options and format: a turn grammar's inputs, without compiling its automaton."""

    tools: ToolSet
    options: GrammarOptions
    format: ToolCallFormat


def rule_grammar(turn: TurnGrammar | _Compiled) -> RuleGrammar:
    """The turn policy of ``turn`` as named rules (what :func:`to_gbnf` and :func:`to_lark` print)."""
    turn_policy = policy.turn_policy(turn.tools, turn.options, turn.format)
    lowering = _RuleLowering(turn_policy)
    root = lowering(turn_policy.turn)
    options = json.loads(turn.options.key)
    header = (
        f"toolgrammar {turn.format.name} turn grammar; tools: {', '.join(turn.tools.names) or '(none)'}",
        f"options: {json.dumps(options, sort_keys=True)}",
        "The grammar describes the turn's text; its end is the end of the turn.",
        "Generated by toolgrammar (toolgrammar grammar --export, or python -m toolgrammar.exports write grammars/).",
    )
    return RuleGrammar(root=root, rules=lowering.rules, header=header)


# -- printing: GBNF ------------------------------------------------------------------------------

_GBNF_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", '"': '\\"'}
_GBNF_CLASS_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "]": "\\]", "[": "\\[", "-": "\\x2D"}


def _gbnf_char(c: str, escapes: dict[str, str]) -> str:
    if c in escapes:
        return escapes[c]
    cp = ord(c)
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02X}"
    if cp < 0x80:
        return c
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"


def _gbnf_class(ranges: tuple[tuple[int, int], ...]) -> str:
    complement = _complement(ranges)
    negate = bool(ranges) and len(complement) < len(ranges) and bool(complement)
    spans = complement if negate else ranges
    if not spans:
        raise GrammarError("cannot export an empty character class")  # pragma: no cover
    out = []
    for k, (a, z) in enumerate(spans):
        first = _gbnf_char(chr(a), _GBNF_CLASS_ESCAPES)
        if k == 0 and not negate and first == "^":
            first = "\\x5E"
        out.append(first if a == z else first + "-" + _gbnf_char(chr(z), _GBNF_CLASS_ESCAPES))
    return "[" + ("^" if negate else "") + "".join(out) + "]"


def _print(expr: Expr, ref: Callable[[str], str], string: Callable[[str], str], cls: Callable[[Cls], str]) -> str:
    """An expression in GBNF/lark expression syntax (the two share it: ``( | ) * + ? {m,n}``)."""
    if isinstance(expr, Str):
        return string(expr.text)
    if isinstance(expr, Cls):
        return cls(expr)
    if isinstance(expr, Ref):
        return ref(expr.name)
    if isinstance(expr, Cat):
        if not expr.items:
            return string("")
        return " ".join(
            f"({p})" if isinstance(it, Or) else p for it in expr.items for p in [_print(it, ref, string, cls)]
        )
    if isinstance(expr, Or):
        return " | ".join(_print(it, ref, string, cls) for it in expr.items)
    if isinstance(expr, Rep):
        inner = _print(expr.item, ref, string, cls)
        if isinstance(expr.item, (Cat, Or, Rep)):
            inner = f"({inner})"
        quantifier = {(0, 1): "?", (0, None): "*", (1, None): "+"}.get((expr.lo, expr.hi))
        if quantifier is None:
            if expr.hi == expr.lo:
                quantifier = f"{{{expr.lo}}}"
            else:
                quantifier = f"{{{expr.lo},{'' if expr.hi is None else expr.hi}}}"
        return inner + quantifier
    raise TypeError(f"not an expression: {expr!r}")  # pragma: no cover


def _gbnf_string(text: str) -> str:
    return '"' + "".join(_gbnf_char(c, _GBNF_ESCAPES) for c in text) + '"'


def print_gbnf(grammar: RuleGrammar) -> str:
    """A rule grammar in llama.cpp's GBNF syntax (see the module docstring for the constructs used)."""

    def show(expr: Expr) -> str:
        return _print(expr, lambda name: name, _gbnf_string, lambda c: _gbnf_class(c.ranges))

    lines = [f"# {line}" for line in grammar.header]
    lines.append(f"root ::= {show(grammar.root)}")
    lines.extend(f"{name} ::= {show(body)}" for name, body in grammar.rules.items())
    return "\n".join(lines) + "\n"


# -- printing: lark (llguidance) -------------------------------------------------------------------

_RUST_CLASS_META = set("\\[]^-&~/")


def _rust_char(cp: int) -> str:
    c = chr(cp)
    if c in _RUST_CLASS_META:
        return "\\" + c
    if cp < 0x20 or cp == 0x7F or cp >= 0x80:
        return f"\\x{{{cp:X}}}"
    return c


def _lark_class(ranges: tuple[tuple[int, int], ...]) -> str:
    complement = _complement(ranges)
    negate = bool(ranges) and len(complement) < len(ranges) and bool(complement)
    spans = complement if negate else ranges
    body = "".join(_rust_char(a) if a == z else _rust_char(a) + "-" + _rust_char(z) for a, z in spans)
    return "/[" + ("^" if negate else "") + body + "]/"


def _lark_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=True).replace("\x7f", "\\u007f")


def _lark_name(name: str) -> str:
    return name.upper().replace("-", "_")


LARK_MAX_NESTING = 12
"""Parenthesis depth past which a lark terminal's sub-expression becomes a terminal of its own: llguidance
refuses deeper nesting ("lark grammar too deeply nested"), which text avoiding a long marker reaches
(gpt-oss reasoning avoids ``<|end|><|start|>assistant``)."""


def _hoisted(grammar: RuleGrammar, max_depth: int) -> RuleGrammar:
    """The same grammar with every sub-expression nested deeper than ``max_depth`` moved into a rule of its
    own (named after the rule it came from), so that no printed rule nests deeper."""
    rules: dict[str, Expr] = {}
    counter: dict[str, int] = {}

    def lift(expr: Expr, owner: str, depth: int) -> Expr:
        if isinstance(expr, (Str, Cls, Ref)):
            return expr
        if depth >= max_depth:
            counter[owner] = counter.get(owner, 0) + 1
            name = f"{owner}-part-{counter[owner]}"
            rules[name] = lift(expr, owner, 0)
            return Ref(name)
        if isinstance(expr, Rep):
            return Rep(lift(expr.item, owner, depth + 1), expr.lo, expr.hi)
        items = tuple(lift(it, owner, depth + 1) for it in expr.items)
        return Cat(items) if isinstance(expr, Cat) else Or(items)

    root = lift(grammar.root, "turn", 0)
    for name, body in grammar.rules.items():
        rules[name] = lift(body, name, 0)
    return RuleGrammar(root=root, rules=rules, header=grammar.header)


def print_lark(grammar: RuleGrammar) -> str:
    """A rule grammar as llguidance's lark: every rule a terminal, ``start: TURN`` (one lexeme); nesting past
    :data:`LARK_MAX_NESTING` goes into terminals of its own."""
    grammar = _hoisted(grammar, LARK_MAX_NESTING)

    def show(expr: Expr) -> str:
        return _print(expr, _lark_name, _lark_string, lambda c: _lark_class(c.ranges))

    lines = [f"// {line}" for line in grammar.header]
    lines.append("// Every rule is a terminal (one lexeme): llguidance's lexer is greedy and does not back up.")
    lines.append("start: TURN")
    lines.append(f"TURN: {show(grammar.root)}")
    lines.extend(f"{_lark_name(name)}: {show(body)}" for name, body in grammar.rules.items())
    return "\n".join(lines) + "\n"


# -- the exports --------------------------------------------------------------------------------


def to_gbnf(turn: TurnGrammar) -> str:
    """The turn grammar in GBNF (llama.cpp ``--grammar-file``, Ollama, xgrammar's EBNF reader)."""
    return print_gbnf(rule_grammar(turn))


def to_lark(turn: TurnGrammar) -> str:
    """The turn grammar as a lark grammar llguidance reads (``llguidance.LLMatcher.grammar_from_lark``)."""
    return print_lark(rule_grammar(turn))


def to_structural_tag(turn: TurnGrammar) -> str:
    """The turn grammar as an xgrammar structural tag, JSON text (raises :class:`GrammarError` where a
    structural tag cannot say it: see :mod:`toolgrammar.turn.structural_tag`)."""

    return json.dumps(turn_structural_tag(turn), indent=1, ensure_ascii=True) + "\n"


def export(turn: TurnGrammar, kind: str) -> str:
    """One export of the turn grammar by name (one of :data:`EXPORTS`)."""
    return _exports(turn, (kind,))[kind]


def _exports(turn: TurnGrammar | _Compiled, kinds: Iterable[str]) -> dict[str, str]:
    """Several exports of one turn grammar (its rules built once); a refused one raises."""
    kinds = list(kinds)
    for kind in kinds:
        if kind not in EXPORTS:
            raise GrammarError(f"unknown export {kind!r}; choose {', '.join(EXPORTS)}")
    rules = rule_grammar(turn) if {"gbnf", "lark"} & set(kinds) else None
    out = {}
    for kind in kinds:
        if kind == "gbnf":
            out[kind] = print_gbnf(rules)  # type: ignore[arg-type]
        elif kind == "lark":
            out[kind] = print_lark(rules)  # type: ignore[arg-type]
        else:
            out[kind] = to_structural_tag(turn)  # type: ignore[arg-type]  # reads tools, options and format only
    return out


# -- golden files ---------------------------------------------------------------------------------


def golden_files(formats: Iterable[str] | None = None) -> dict[str, str]:
    """``<format>/<policy><suffix>`` -> text, for the bundled tools, every policy of :data:`POLICIES` and
    every format (default: every registered format). The structural tag is left out where it refuses the
    policy (``qwen-xml``); GBNF and lark say every policy (an error there raises)."""

    tools = load_tools(str(bundled_tools_path()))
    out: dict[str, str] = {}
    for fmt in FORMATS if formats is None else formats:
        if formats is None and without_grammar(fmt):
            continue  # a format with a parser only (say so in grammars/README.md)
        for name, options in POLICIES.items():
            opts = options_from_kwargs(format=fmt, **options)
            spec = _Spec(tools=tools, options=opts, format=get_format(fmt))
            spec.format.check_tools(tools)
            texts = _exports(spec, ("gbnf", "lark"))
            with contextlib.suppress(GrammarError):  # where a structural tag cannot say this format's turn
                texts.update(_exports(spec, ("structural-tag",)))
            for kind, text in texts.items():
                out[f"{fmt}/{name}{SUFFIXES[kind]}"] = text
    return dict(sorted(out.items()))


def without_grammar(fmt: str) -> str | None:
    """Why the registered format ``fmt`` has no grammar to export (its parser only), or ``None``."""

    try:
        get_format(fmt).block_grammar(load_tools(str(bundled_tools_path())), options_from_kwargs(format=fmt))
    except GrammarError as error:
        return str(error)
    return None


def write_golden(directory: str | Path, formats: Iterable[str] | None = None) -> list[Path]:
    """Write :func:`golden_files` under ``directory`` (removing stale exports of the formats written)."""
    root = Path(directory)
    files = golden_files(formats)
    written = []
    for fmt in sorted({key.split("/", 1)[0] for key in files}):
        folder = root / fmt
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            if (
                old.is_file()
                and any(old.name.endswith(s) for s in SUFFIXES.values())
                and f"{fmt}/{old.name}" not in files
            ):
                old.unlink()
    for key, text in sorted(files.items()):
        path = root / key
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")
        written.append(path)
    return written


def check_golden(
    directory: str | Path, formats: Iterable[str] | None = None, *, expected: dict[str, str] | None = None
) -> list[str]:
    """What differs between the golden files under ``directory`` and :func:`golden_files` (empty: nothing).

    ``formats`` defaults to the format folders present under ``directory``; ``expected``: the
    :func:`golden_files` of those formats, when already computed."""
    root = Path(directory)
    if formats is None:
        formats = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    formats = list(formats)
    if expected is None:
        expected = golden_files(formats)
    problems = []
    for key, text in sorted(expected.items()):
        path = root / key
        if not path.is_file():
            problems.append(f"missing: {key}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"out of date: {key}")
    for fmt in formats:
        folder = root / fmt
        for path in sorted(folder.iterdir()) if folder.is_dir() else []:
            key = f"{fmt}/{path.name}"
            if any(path.name.endswith(s) for s in SUFFIXES.values()) and key not in expected:
                problems.append(f"stale: {key}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m toolgrammar.exports write|check DIRECTORY [FORMAT...]``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2 or args[0] not in ("write", "check"):
        print("usage: python -m toolgrammar.exports write|check DIRECTORY [FORMAT...]", file=sys.stderr)
        return 2
    command, directory, formats = args[0], args[1], args[2:] or None
    if command == "write":
        for path in write_golden(directory, formats):
            print(path)
        return 0
    problems = check_golden(directory, formats)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"regenerate them: python -m toolgrammar.exports write {directory}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
