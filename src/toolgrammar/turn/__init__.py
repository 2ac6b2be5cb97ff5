"""The grammar of a whole assistant turn: the tool-choice policy (:mod:`~toolgrammar.turn.policy`), its
compiled automaton (:mod:`~toolgrammar.turn.grammar`), the strict parser, the exports (GBNF, Lark, regex,
xgrammar structural tags) and the shipped skeletons.
"""
