"""The engine in the frameworks people run models with: transformers (:mod:`~toolgrammar.integrations.hf`,
:mod:`~toolgrammar.integrations.hf_generate`), outlines, vLLM (the logits processor, the tool-parser plugin and
its engine-free half, :mod:`~toolgrammar.integrations.serving`). torch, transformers and vLLM are imported here,
never beneath.
"""
