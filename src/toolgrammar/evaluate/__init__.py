"""Measuring what the constraint costs and what it hides: constrained vs free runs on the same prompts and seeds
(:mod:`~toolgrammar.evaluate.compare`), the BFCL suite, relevance gates, the sandboxed real-model runs and the
CanIToolCall conformance adapter. The layer above the integrations; only the CLI builds on it.
"""
