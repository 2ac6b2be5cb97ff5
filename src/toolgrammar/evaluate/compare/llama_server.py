"""llama.cpp's own tool-call constraint, the third side of ``--backend llama.cpp --llama-server``.

llama-server, started with ``--jinja`` on the same GGUF, renders each request's messages and tools with the
model's chat template and builds its own grammar from the tools (for Qwen2.5's template: a lazy grammar that
wakes at ``<tool_call>`` and holds each call to ``{"name": ..., "arguments": <the tool's schema>}``). This is
what a llama.cpp user gets from ``tools`` in ``/v1/chat/completions``. The side asks for the raw token ids
(``return_tokens``), so the turn is judged by toolgrammar's strict parser like the other two sides, not by the
server's own reading of it.

The binary is the llama.cpp that llama-cpp-python 0.3.36 vendors, built once by ``scripts/llama-server.sh``
(:func:`llama_server_binary` finds it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from toolgrammar.evaluate.compare.config import CompareConfig, CompareError
from toolgrammar.evaluate.compare.generation import Generation

LLAMA_SERVER_VERSION = "0.3.36"
"""The llama-cpp-python release whose vendored llama.cpp the server is built from (the processor's own)."""

START_TIMEOUT_S = 300.0
"""How long the server may take to load the model before the run gives up (a 1.5B GGUF loads in seconds)."""


def llama_server_binary() -> Path:
    """The llama-server to run: ``$TOOLGRAMMAR_LLAMA_SERVER``, else the one ``scripts/llama-server.sh`` keeps.

    Raises :class:`CompareError` naming the build command when there is none.
    """
    given = os.environ.get("TOOLGRAMMAR_LLAMA_SERVER")
    if given:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise CompareError(f"$TOOLGRAMMAR_LLAMA_SERVER={given!r} is not an executable file")
        return path
    folder = os.environ.get("TOOLGRAMMAR_BIN")
    root = Path(folder).expanduser() if folder else Path.home() / ".cache" / "toolgrammar" / "bin"
    path = root / f"llama-server-{LLAMA_SERVER_VERSION}"
    if not path.is_file():
        raise CompareError(
            f"--llama-server needs llama.cpp's server, built once from llama-cpp-python {LLAMA_SERVER_VERSION}'s "
            f"llama.cpp: bash scripts/llama-server.sh (about 8 minutes; kept as {path}), or set "
            "$TOOLGRAMMAR_LLAMA_SERVER to a llama-server of that llama.cpp"
        )
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LlamaServer:
    """A llama-server process on one GGUF (``--jinja``, one slot, localhost), stopped by :meth:`close`."""

    def __init__(self, gguf: Path, *, n_ctx: int, threads: int, binary: Path | None = None):
        self.binary = binary or llama_server_binary()
        self.port = _free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        command = [
            str(self.binary),
            "--model",
            str(gguf),
            "--jinja",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ctx-size",
            str(n_ctx),
            "--threads",
            str(threads),
            "--parallel",
            "1",
            "--reasoning-format",
            "none",  # the reasoning part stays in the text: the strict parser reads the whole turn
            "--no-webui",
        ]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _log_tail(self) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-15:])

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CompareError(
                    f"llama-server ({self.binary}) exited with status {self.process.returncode} before it was "
                    f"ready:\n{self._log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)
        self.close()
        raise CompareError(f"llama-server was not ready after {START_TIMEOUT_S:.0f} s:\n{self._log_tail()}")

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``/v1/chat/completions``; an HTTP error becomes a :class:`CompareError` with the server's message."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=3600) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")
            raise CompareError(f"llama-server answered {error.code}: {detail}") from error

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


def tool_choice_request(tool_choice: str) -> str | dict[str, Any]:
    """The OpenAI ``tool_choice`` of a compare ``--tool-choice``."""
    if tool_choice in ("auto", "required", "none"):
        return tool_choice
    return {"type": "function", "function": {"name": tool_choice}}


def request_body(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]], config: CompareConfig, seed: int
) -> dict[str, Any]:
    """One chat request with the run's tools, policy, budget and sampling (every other sampler neutral)."""
    greedy = config.temperature == 0
    return {
        "messages": messages,
        "tools": tools,
        "tool_choice": tool_choice_request(config.tool_choice),
        "parallel_tool_calls": config.parallel_tool_calls,
        "chat_template_kwargs": {"enable_thinking": config.reasoning != "disabled"},
        "max_tokens": config.max_new_tokens,
        "seed": seed,
        "temperature": 0.0 if greedy else config.temperature,
        "top_k": 0 if greedy else config.top_k,
        "top_p": 1.0 if greedy else config.top_p,
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "dry_multiplier": 0.0,
        "xtc_probability": 0.0,
        "mirostat": 0,
        "cache_prompt": True,
        "return_tokens": True,
        "verbose": True,
    }


class LlamaServerSide:
    """The third side: each conversation sent to llama-server with its tools; the raw tokens decoded and judged."""

    def __init__(self, server: LlamaServer, token_bytes: Sequence[bytes], eos_ids: frozenset[int] | set[int]):
        self.server = server
        self.token_bytes = token_bytes
        self.eos_ids = frozenset(eos_ids)
        self.settings: dict[str, Any] = {}
        """What llama.cpp made of the first request: its chat format, grammar, laziness and triggers (for the
        report: the grammar this side ran under)."""

    def generate(
        self,
        conversations: Sequence[list[dict[str, Any]]],
        tools: list[dict[str, Any]],
        config: CompareConfig,
        *,
        seed: int,
        on_step: Callable[[int], None] | None = None,
    ) -> list[Generation]:
        """One turn per conversation, one after another, row ``i`` seeded ``seed * 65537 + i`` (as the others)."""
        outputs = []
        for row, messages in enumerate(conversations):
            outputs.append(self._one(messages, tools, config, seed * 65_537 + row))
            if on_step is not None:
                on_step(row + 1)
        return outputs

    def _one(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], config: CompareConfig, seed: int
    ) -> Generation:
        try:
            answer = self.server.chat(request_body(messages, tools, config, seed))
        except CompareError as error:
            # A request the server refuses (a schema its grammar builder rejects) is this side's failure on
            # that row, counted and shown, not the end of the run.
            return Generation(text="", tokens=0, finish="error", processor_error=str(error), stop_closes=0)
        verbose = answer.get("__verbose") or {}
        if not self.settings:
            given = verbose.get("generation_settings") or {}
            self.settings = {
                "binary": str(self.server.binary),
                **{k: given.get(k) for k in ("chat_format", "grammar", "grammar_lazy", "grammar_triggers")},
            }
        tokens = verbose.get("tokens")
        if not isinstance(tokens, list):
            raise CompareError(
                "llama-server returned no raw tokens (return_tokens): is it a llama-server of llama-cpp-python "
                f"{LLAMA_SERVER_VERSION}'s llama.cpp?"
            )
        kept = [int(t) for t in tokens if int(t) not in self.eos_ids]
        text = b"".join(self.token_bytes[t] for t in kept).decode("utf-8", "replace")
        finish = answer["choices"][0].get("finish_reason")
        ended = verbose.get("stop_type") in ("eos", "word") or finish in ("stop", "tool_calls")
        return Generation(
            text=text,
            tokens=len(tokens) + (1 if ended and len(kept) == len(tokens) else 0),  # its end counted, as the others
            finish="stop" if ended else "length",
            processor_error=None,
            stop_closes=0,
        )


__all__ = [
    "LLAMA_SERVER_VERSION",
    "LlamaServer",
    "LlamaServerSide",
    "llama_server_binary",
    "request_body",
    "tool_choice_request",
]
