"""Prefix-true masking: a masked token's probability goes to the allowed tokens its accepted bytes lead to.

A mask removes tokens and the sampler renormalizes over what is left; where the model's favourite token
crosses a boundary the grammar draws differently, what is left may not be what it meant. After
``"number_of_years": 15`` with every property written, the embedded model puts 0.49 on ``},`` and 0.46
on ``,``: both are masked (``,`` cannot follow, and neither can the ``,`` after ``}``), and of the 0.035
left ``0`` has half, so greedy writes zeros until the budget closes the block.

The byte-level view says where that mass belongs. The probability that the next bytes start with a string
``p`` is the sum over the tokens that start with ``p``; ``},`` is one of the tokens that start with
``}``, so its probability is part of the model's probability of ``}``, which the grammar accepts. So, at a
constrained step, each masked token ``t`` whose bytes start with a non-empty string the grammar accepts
from this state gives its probability to the allowed tokens *consistent* with its longest such prefix
``p`` (the tokens that start with ``p``, and the shorter ones ``p`` starts with: ``}``, ``}}``,
``}\\n`` for ``},``), in proportion to their own. A token with no accepted prefix (``,`` above) is
masked as before: its probability is spread over every allowed token by the renormalization. So is a
token whose accepted prefix leaves the row where it is (inside a string, ``.\\n``: the text goes on, and
only the raw newline is refused): its accepted part crosses no boundary, so the row's own
renormalization already keeps the mass in the same place. And so is a token whose accepted prefix is
whitespace alone (`` the`` after ``"name":``): the model wants a word there, which says nothing about
where the value goes.

What holds, per row and step:

- **Only allowed tokens gain.** A receiver is an allowed token of the step's mask (the budget's
  included: a receiver the budget removed gets nothing, and where every receiver of a prefix is removed
  that prefix's donors are masked as before). Masked tokens stay at ``-inf``; allowed tokens that are no
  receiver keep their logit bit for bit.
- **Nothing changes outside blocks**: the tables of states where the turn may end are empty.
- **The prefix mass is kept**: for every byte string ``p`` the grammar accepts here, the (unnormalized)
  mass on allowed tokens consistent with ``p`` is at least what the model put on the allowed tokens
  consistent with ``p`` plus every masked token that starts with ``p`` (a masked token starting with ``p``
  has a longest accepted prefix ``p'`` that extends ``p``, and every token consistent with ``p'`` is
  consistent with ``p``), wherever some allowed token is consistent with ``p'``.

The per-state table (donors grouped by their prefix, and each group's receivers) comes from one walk of
the vocabulary's trie from the state, on a state's first constrained visit, and is kept (a bounded number
of states, like the budget's needs). A state with no donor costs a dictionary lookup per step.

Import boundary: numpy and the C core (the torch form is :meth:`toolgrammar.runtime.masking.MaskApplier.pour`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgrammar import native as native_core

if TYPE_CHECKING:
    from toolgrammar.runtime.token_table import TokenTable


@dataclass(frozen=True, eq=False)
class PrefixTable:
    """One state's donors and receivers, by group (one group per accepted prefix).

    ``donors[i]`` (a masked token) belongs to group ``donor_group[i]``; pair ``j`` makes
    ``receivers[receiver_slot[j]]`` (an allowed token) a receiver of group ``receiver_group[j]``.
    ``receivers`` lists each receiver once (sorted), so its logit is written once."""

    donors: np.ndarray
    donor_group: np.ndarray
    receivers: np.ndarray
    receiver_slot: np.ndarray
    receiver_group: np.ndarray
    n_groups: int
    prefixes: tuple[bytes, ...] = ()
    """Each group's accepted prefix (for reports and tests)."""

    @property
    def empty(self) -> bool:
        return self.n_groups == 0

    @property
    def nbytes(self) -> int:
        arrays = (self.donors, self.donor_group, self.receivers, self.receiver_slot, self.receiver_group)
        return sum(a.nbytes for a in arrays)

    def group_of(self, prefix: bytes) -> int:
        """The group of ``prefix`` (-1: none)."""
        return self.prefixes.index(prefix) if prefix in self.prefixes else -1


def _ids(values: np.ndarray | list[int]) -> np.ndarray:
    out = np.asarray(values, dtype=np.int64)
    out.flags.writeable = False
    return out


LAYOUT = b" \t\n\r"
"""The bytes a prefix made of which alone makes no donor (JSON's whitespace)."""


NO_TABLE = PrefixTable(_ids([]), _ids([]), _ids([]), _ids([]), _ids([]), 0)
"""The table of a state where no masked token has an accepted prefix (and of every state outside blocks)."""


def build_prefix_table(
    table: TokenTable, node_states: np.ndarray, viable: np.ndarray, allowed: np.ndarray, in_place: np.ndarray
) -> PrefixTable:
    """The :class:`PrefixTable` of one state.

    ``node_states``: the state each trie node of ``table`` reaches from the state (:meth:`TokenTable.node_states`);
    ``viable``: per node, whether the grammar can still finish from there; ``allowed``: per token, whether the
    state's mask allows it (no budget); ``in_place``: per automaton state, whether it is the state itself (or
    one that behaves the same): a prefix that ends there crossed no boundary, and makes no donor."""
    parent = table.trie_parent
    leaf = table.trie_leaf
    n_nodes = len(parent)
    if len(viable) != n_nodes or len(node_states) != n_nodes:
        raise ValueError(f"node arrays have {len(viable)} / {len(node_states)} entries, the trie {n_nodes} nodes")
    # Deepest viable node on the path to each node (itself included), level by level: -1 where none.
    deepest = np.full(n_nodes, -1, dtype=np.int64)
    levels = table.trie_levels
    for d in range(len(levels) - 1):
        lo, hi = levels[d], levels[d + 1]
        own = np.arange(lo, hi, dtype=np.int64)
        up = parent[lo:hi]
        inherited = deepest[up] if d else np.full(hi - lo, -1, dtype=np.int64)
        deepest[lo:hi] = np.where(viable[lo:hi], own, inherited)
    text = ~table.is_control
    prefix_node = deepest[leaf]
    donor_mask = ~allowed & text & (prefix_node >= 0)
    donor_mask[donor_mask] = ~in_place[node_states[prefix_node[donor_mask]]]
    donors = np.flatnonzero(donor_mask)
    if not len(donors):
        return NO_TABLE
    group_nodes, donor_group = np.unique(prefix_node[donors], return_inverse=True)
    # A prefix of layout alone (whitespace) makes no donor: ` the` after `"name":` wants a word, and says
    # nothing about where the value goes (and such groups hold most of the vocabulary).
    layout = np.array([not node_bytes(table, int(n)).strip(LAYOUT) for n in group_nodes.tolist()], dtype=bool)
    if layout.any():
        keep = ~layout[donor_group]
        donors = donors[keep]
        if not len(donors):
            return NO_TABLE
        group_nodes, donor_group = np.unique(prefix_node[donors], return_inverse=True)
    group_of_node = np.full(n_nodes, -1, dtype=np.int64)
    group_of_node[group_nodes] = np.arange(len(group_nodes))
    pair_tokens: list[np.ndarray] = []
    pair_groups: list[np.ndarray] = []
    # Allowed tokens that start with a group's prefix: every group node on the way up from their leaf.
    under_group = np.zeros(n_nodes, dtype=bool)
    under_group[group_nodes] = True
    for d in range(1, len(levels) - 1):
        lo, hi = levels[d], levels[d + 1]
        under_group[lo:hi] |= under_group[parent[lo:hi]]
    receivers = np.flatnonzero(allowed & text & under_group[leaf])
    at = leaf[receivers]
    who = receivers
    while len(at):
        g = group_of_node[at]
        hit = g >= 0
        if hit.any():
            pair_tokens.append(who[hit])
            pair_groups.append(g[hit])
        at = parent[at]
        keep = at >= 0
        at, who = at[keep], who[keep]
    # Allowed tokens that a group's prefix starts with: the tokens ending on the way up from the group node.
    order, sorted_leaf = table.tokens_by_leaf
    at = parent[group_nodes]
    owner = np.arange(len(group_nodes), dtype=np.int64)
    while len(at):
        keep = at >= 0
        at, owner = at[keep], owner[keep]
        if not len(at):
            break
        lo = np.searchsorted(sorted_leaf, at, side="left")
        hi = np.searchsorted(sorted_leaf, at, side="right")
        for k in np.flatnonzero(hi > lo).tolist():
            tokens = order[lo[k] : hi[k]]
            tokens = tokens[allowed[tokens] & text[tokens]]
            if len(tokens):
                pair_tokens.append(tokens.astype(np.int64))
                pair_groups.append(np.full(len(tokens), owner[k], dtype=np.int64))
        at = parent[at]
    if not pair_tokens:
        return NO_TABLE
    tokens = np.concatenate(pair_tokens)
    groups = np.concatenate(pair_groups)
    pairs = np.unique(tokens * len(group_nodes) + groups)
    tokens, groups = pairs // len(group_nodes), pairs % len(group_nodes)
    # Groups with no receiver keep their donors masked as before: they leave the table.
    served = np.zeros(len(group_nodes), dtype=bool)
    served[groups] = True
    renumber = np.cumsum(served) - 1
    keep_donor = served[donor_group]
    donors, donor_group = donors[keep_donor], renumber[donor_group[keep_donor]]
    groups = renumber[groups]
    unique_receivers, slot = np.unique(tokens, return_inverse=True)
    prefixes = tuple(node_bytes(table, int(node)) for node in group_nodes[served].tolist())
    return PrefixTable(
        _ids(donors), _ids(donor_group), _ids(unique_receivers), _ids(slot), _ids(groups), int(served.sum()), prefixes
    )


def node_bytes(table: TokenTable, node: int) -> bytes:
    """The bytes a trie node spells (text nodes: symbols below 256)."""
    out = []
    while node >= 0:
        out.append(int(table.trie_symbol[node]))
        node = int(table.trie_parent[node])
    return bytes(s for s in reversed(out) if s < 256)


_ASK = object()
"""``core`` not given: ask :func:`toolgrammar.native.module` (an environment read, about 2 us)."""


def pour_host_row(row: np.ndarray, donor_logits: np.ndarray, prefix: PrefixTable, core: Any = _ASK) -> None:
    """Give the donors' probability (``donor_logits``: their logits read before masking) to the receivers of
    ``row`` (masked already; a numpy view), in place. See the module's rule.

    In float64, shifted by the largest logit involved: a group whose logits all lie more than 700 below it
    (``exp`` underflows) moves nothing, as a group whose receivers are all masked moves nothing. By the C core
    where it is built (a float32 row: one call), else :func:`pour_host_row_numpy`. Per-token callers pass
    ``core``, the C core their token table chose (``grammar.table.native``; ``None``: numpy)."""
    if prefix.empty:
        return
    if core is _ASK:
        core = native_core.module()
    if core is not None and row.dtype == np.float32 and donor_logits.dtype == np.float32 and row.flags.c_contiguous:
        scratch = np.empty(2 * prefix.n_groups + len(prefix.receivers), dtype=np.float64)
        core.pour(
            row,
            np.ascontiguousarray(donor_logits),
            prefix.donor_group,
            prefix.receivers,
            prefix.receiver_slot,
            prefix.receiver_group,
            scratch,
        )
        return
    pour_host_row_numpy(row, donor_logits, prefix)


def pour_host_row_numpy(row: np.ndarray, donor_logits: np.ndarray, prefix: PrefixTable) -> None:
    """:func:`pour_host_row` in numpy (the C core's twin: the same sums in the same order)."""
    if prefix.empty:
        return
    receiver_logits = row[prefix.receivers].astype(np.float64)
    donor = donor_logits.astype(np.float64)
    top = max(donor.max(initial=-np.inf), receiver_logits.max(initial=-np.inf))
    if not np.isfinite(top):
        return
    given = np.bincount(prefix.donor_group, np.exp(donor - top), prefix.n_groups)
    held = np.bincount(prefix.receiver_group, np.exp(receiver_logits - top)[prefix.receiver_slot], prefix.n_groups)
    ratio = np.divide(given, held, out=np.zeros_like(given), where=held > 0.0)
    gain = np.bincount(prefix.receiver_slot, ratio[prefix.receiver_group], len(prefix.receivers))
    row[prefix.receivers] = (receiver_logits + np.log1p(gain)).astype(row.dtype)


__all__ = [
    "LAYOUT",
    "NO_TABLE",
    "PrefixTable",
    "build_prefix_table",
    "node_bytes",
    "pour_host_row",
    "pour_host_row_numpy",
]
