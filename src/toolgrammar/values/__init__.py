"""JSON Schema values as grammar nodes: the normalized schemas of :mod:`toolgrammar.schema` lowered onto
:mod:`toolgrammar.automata`.

- :mod:`~toolgrammar.values.json_grammar`: a normalized schema as the expression tree of its JSON values
  (canonical spelling by default), with the size check of each part;
- :mod:`~toolgrammar.values.strings`: the language of a node's string keywords spelled as bytes (inside a
  JSON string, or raw), forbidden words kept out;
- :mod:`~toolgrammar.values.numbers`: numbers within bounds, built from the plans of
  :mod:`toolgrammar.schema.bounds` (the same decisions loading checks a tool with).
"""
