"""A tree printed as a Python regular expression: for other engines, and for tests that cross-check this
compiler against an independent one.
"""

from __future__ import annotations

from toolgrammar.automata.nodes import (
    Alt,
    Avoid,
    Group,
    Lit,
    Members,
    Node,
    NotPrefixed,
    Repeat,
    Seq,
    Shared,
    Sym,
    byte_range,
    class_char,
)
from toolgrammar.errors import GrammarError


def to_regex(node: Node) -> str:
    """Render the tree as a Python ``re`` pattern over *characters* (UTF-8 decoded).

    ``EOS`` renders as ``$`` and ``SPECIAL`` as nothing: the pattern describes the text of a turn.
    ``Avoid`` renders as a tempered token ``(?:(?!w)x)*``, which ``re`` supports but not every engine.
    """
    if isinstance(node, Lit):
        return _escape(node.data.decode("utf-8"))
    if isinstance(node, Sym):
        if node.regex is not None:
            return node.regex
        return _mask_to_class(node.mask)
    if isinstance(node, Seq):
        return "".join(_wrap(to_regex(it), it, in_seq=True) for it in node.items)
    if isinstance(node, Alt):
        if len(node.items) == 1:  # a Dispatch of one tool
            return to_regex(node.items[0])
        return "(?:" + "|".join(to_regex(it) for it in node.items) + ")"
    if isinstance(node, Repeat):
        inner = _wrap(to_regex(node.item), node.item, in_seq=False)
        if (node.lo, node.hi) == (0, 1):
            return inner + "?"
        if (node.lo, node.hi) == (0, None):
            return inner + "*"
        if (node.lo, node.hi) == (1, None):
            return inner + "+"
        return inner + "{" + str(node.lo) + "," + ("" if node.hi is None else str(node.hi)) + "}"
    if isinstance(node, Group):
        return node.regex if node.regex is not None else to_regex(node.item)
    if isinstance(node, Members):
        return _members_regex(node)
    if isinstance(node, Shared):
        return to_regex(node.item)
    if isinstance(node, NotPrefixed):
        return f"(?!{_escape(node.word.decode('utf-8'))}){to_regex(node.item)}"
    if isinstance(node, Avoid):
        guard = "|".join(_escape(w.decode("utf-8")) for w in node.words)
        item = node.item
        if isinstance(item, Repeat) and item.hi is None:
            body = to_regex(item.item)
            q = "*" if item.lo == 0 else "+"
            return f"(?:(?!{guard}){body}){q}"
        return f"(?:(?!.*(?:{guard})){to_regex(item)})"
    raise GrammarError(f"unknown grammar node {type(node).__name__}")


_REGEX_META = set(".^$*+?{}[]\\|()")


_CONTROL_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(text: str) -> str:
    """Escape regex metacharacters only; control characters as ``\\n``/``\\xHH`` (portable to other engines)."""
    out = []
    for c in text:
        if c in _REGEX_META:
            out.append("\\" + c)
        elif c in _CONTROL_ESCAPES:
            out.append(_CONTROL_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)


def _members_regex(node: Members) -> str:
    """O(n^2) rendering: choose the first member present, then each later one with its separator."""
    sep = to_regex(node.sep)
    branches = []
    for k, (first, _required) in enumerate(node.items):
        parts = [to_regex(first)]
        for member, required in node.items[k + 1 :]:
            piece = sep + to_regex(member)
            parts.append(piece if required else f"(?:{piece})?")
        branches.append("".join(parts))
        if node.items[k][1]:
            break  # a required member must be the first present one if all before it were skipped
    if all(not r for _, r in node.items):
        branches.append("")
    return "(?:" + "|".join(branches) + ")"


def _wrap(rx: str, node: Node, *, in_seq: bool) -> str:
    """Parenthesize ``rx`` where a quantifier or concatenation would otherwise bind wrongly."""
    if in_seq or isinstance(node, (Avoid, Sym)) or (isinstance(node, Alt) and len(node.items) > 1):
        return rx
    if isinstance(node, Lit) and len(node.data.decode("utf-8")) <= 1:
        return rx
    if isinstance(node, Group) and node.regex is not None and node.regex.startswith("[") and node.regex.endswith("]"):
        return rx
    return "(?:" + rx + ")"


def _mask_to_class(mask: int) -> str:
    byte_mask = mask & byte_range(0, 255)
    if byte_mask == byte_range(0, 255):
        return r"[\s\S]"
    idx = [i for i in range(128) if byte_mask >> i & 1]
    if byte_mask >> 128:
        # High bytes only appear inside utf8_char(), which carries its own regex.
        raise GrammarError("a byte class with bytes >= 0x80 has no character-level regex")
    if len(idx) == 1:
        return _escape(chr(idx[0]))
    return "[" + "".join(class_char(i) for i in idx) + "]"


__all__ = ["to_regex"]
