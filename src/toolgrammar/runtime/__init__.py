"""The engine at generation time: a turn grammar over a vocabulary (:mod:`~toolgrammar.runtime.token_grammar`),
a cursor per sequence, and what a step does to the logits: masks (:mod:`~toolgrammar.runtime.masking`), steering,
closing on a stop, stop strings where the turn may end (:mod:`~toolgrammar.runtime.stops`).
"""
