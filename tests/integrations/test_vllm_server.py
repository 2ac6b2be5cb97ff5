"""A real vLLM OpenAI server with the toolgrammar tool-parser plugin, driven by the ``openai`` client.

Runs in the vLLM environment only (``scripts/test-vllm.sh``). One server start for the module (the
tiny random Qwen3 on the CPU, about 40 s): the exact command the README gives, with no
``vllm_xargs`` in any request. Every returned call is checked twice: rendered as the format's
block and parsed by the strict parser, and its arguments validated with ``jsonschema`` against the
tool's schema. Hostile requests get HTTP 400 and the server keeps serving.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections.abc import Iterator
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
"""How long the server may take to come up before the fixture gives up (a liveness guard, not a speed limit)."""


def _tools() -> list[dict[str, Any]]:
    data = json.loads(TOOLS_FILE.read_text())
    return data["tools"] if isinstance(data, dict) else data


def server_command(model: Path, port: int, parser: str, *, plugin_flag: bool) -> list[str]:
    """The README's server command (CPU build), on a given port, with the test model's context size.

    The parsers are registered by toolgrammar's ``vllm.general_plugins`` entry point; ``plugin_flag``
    adds the explicit ``--tool-parser-plugin`` (the README's fallback) instead of relying on it.
    """
    plugin = ["--tool-parser-plugin", "toolgrammar.integrations.vllm_tool_parser"] if plugin_flag else []
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--port", str(port),
        "--enable-auto-tool-choice", *plugin, "--tool-call-parser", parser,
        "--logits-processors", "toolgrammar.integrations.vllm:VllmToolCallLogitsProcessor",
        "--max-model-len", "8192", "--dtype", "bfloat16", "--enforce-eager", "--seed", "0",
    ]  # fmt: skip


# hermes through the entry point alone, qwen-xml through the explicit plugin flag.
SERVERS = {"toolgrammar_hermes": False, "toolgrammar_qwen_xml": True}


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from toolgrammar.testing.vllm_server import ServerError, start_openai_server, stop_server, write_tiny_random_qwen3

    parser = request.param
    model = write_tiny_random_qwen3(tmp_path_factory.mktemp("model"))
    log = tmp_path_factory.mktemp("log") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    try:
        proc, base = start_openai_server(
            lambda port: server_command(model, port, parser, plugin_flag=SERVERS[parser]),
            log,
            grace_s=STARTUP_GRACE_S,
            env=env,
        )
    except ServerError as error:
        pytest.fail(str(error))
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=300)
    try:
        yield {"client": client, "base": base, "model": str(model), "proc": proc, "log": log}
    finally:
        stop_server(proc)


def _alive(server: dict[str, Any]) -> None:
    import httpx

    assert server["proc"].poll() is None, server["log"].read_text()[-4000:]
    assert httpx.get(f"{server['base']}/health", timeout=10).status_code == 200


def check_calls(calls: list[tuple[str, str]], tools: list[dict[str, Any]]) -> None:
    """Each (name, arguments JSON) is a valid call: the strict parser on its block, and jsonschema."""
    from toolgrammar.formats import get_format
    from toolgrammar.turn.parser import parse_turn

    schemas = {t["function"]["name"]: t["function"].get("parameters") or {"type": "object"} for t in tools}
    hermes = get_format("hermes")
    for name, arguments in calls:
        args = json.loads(arguments)
        turn = parse_turn(hermes.render_call(name, args), tools)
        assert turn.ok and [c.name for c in turn.tool_calls] == [name], (name, arguments, turn.errors)
        jsonschema.validate(args, schemas[name])


def _create(server: dict[str, Any], **kwargs: Any) -> Any:
    return server["client"].chat.completions.create(model=server["model"], messages=MESSAGES, tools=_tools(), **kwargs)


def _stream(server: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A streamed completion, accumulated as an OpenAI client would."""
    content, calls, finish = "", {}, None
    for chunk in _create(server, stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        content += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            entry["name"] += (tc.function.name or "") if tc.function else ""
            entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
    return {
        "content": content or None,
        "calls": [(c["name"], c["arguments"]) for _, c in sorted(calls.items())],
        "finish": finish,
    }


CHOICES: list[Any] = ["required", {"type": "function", "function": {"name": "run_tests"}}, "auto", "none"]
THINKING = (True, False)


@pytest.mark.parametrize("thinking", THINKING, ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("choice", CHOICES, ids=["required", "named", "auto", "none"])
def test_every_tool_choice_streamed_and_not(server: dict[str, Any], choice: Any, thinking: bool) -> None:
    """Plain SDK requests: calls where the choice demands them, every call valid, the budget kept,
    and the stream adds up to the non-streamed answer for the same seed."""
    tools = _tools()
    for seed, budget in ((1, 40), (2, 96)):
        kwargs = {"tool_choice": choice, "max_tokens": budget, "seed": seed,
                  "extra_body": {"chat_template_kwargs": {"enable_thinking": thinking}}}  # fmt: skip
        reply = _create(server, **kwargs)
        message = reply.choices[0].message
        calls = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
        check_calls(calls, tools)
        assert reply.usage.completion_tokens <= budget
        if choice == "none":
            assert not calls
        elif choice != "auto":
            assert calls, f"{choice!r} made no call: {message.content!r}"
            if isinstance(choice, dict):
                assert {name for name, _ in calls} == {"run_tests"}
            # A cut-off block would be left in content, verbatim: the budget guarantee says there is none.
            assert "<tool_call>" not in (message.content or "")
        streamed = _stream(server, **kwargs)
        assert streamed["calls"] == calls
        assert streamed["content"] == (message.content or None)  # the server sends "" for no content
    _alive(server)


def test_parallel_tool_calls_false_allows_one_call(server: dict[str, Any]) -> None:
    for seed in range(4):
        reply = _create(server, tool_choice="required", parallel_tool_calls=False, max_tokens=96, seed=seed,
                        extra_body={"chat_template_kwargs": {"enable_thinking": False}})  # fmt: skip
        calls = reply.choices[0].message.tool_calls or []
        assert len(calls) == 1
        check_calls([(c.function.name, c.function.arguments) for c in calls], _tools())


FENCE = 73594
"""Qwen3's ```` ``` ```` token."""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_steering_per_request_turns_a_fenced_start_into_a_call(server: dict[str, Any], stream: bool) -> None:
    """``logit_bias`` makes a code fence the model's first choice (as the real 0.5B model's fenced calls are).
    Steered through ``vllm_xargs``, the fence's mass opens a block: valid calls come back as ``tool_calls``;
    the same request unsteered writes the fence and makes no call."""
    from toolgrammar.integrations.serving import STEER_XARG

    def ask(steer: Any) -> dict[str, Any]:
        kwargs = {"tool_choice": "auto", "max_tokens": 64, "seed": 7, "logit_bias": {str(FENCE): 100},
                  "extra_body": {"chat_template_kwargs": {"enable_thinking": False},
                                 "vllm_xargs": {STEER_XARG: steer}}}  # fmt: skip
        if stream:
            return _stream(server, **kwargs)
        message = _create(server, **kwargs).choices[0].message
        calls = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
        return {"content": message.content, "calls": calls}

    steered, plain = ask(True), ask(False)
    assert steered["calls"], steered
    check_calls(steered["calls"], _tools())
    assert not plain["calls"] and (plain["content"] or "").startswith("```"), plain
    assert ask(1) == steered and ask(0) == plain  # vLLM may hand a JSON true over as 1: both mean on
    _alive(server)


def test_lenient_schemas_per_request(server: dict[str, Any]) -> None:
    """A BFCL-style schema (``format: "float"`` on a number): HTTP 400 naming the pointer by default; served
    with ``vllm_xargs`` ``toolgrammar_lenient_schemas``, and its calls valid against the schema as loaded."""
    import httpx

    from toolgrammar.integrations.serving import LENIENT_XARG

    tools = [{"type": "function", "function": {"name": "area", "parameters": {
        "type": "object", "properties": {"r": {"type": "number", "format": "float"}}, "required": ["r"]}}}]  # fmt: skip
    body = {"model": server["model"], "messages": MESSAGES, "tools": tools, "tool_choice": "required", "max_tokens": 48}
    strict = httpx.post(f"{server['base']}/v1/chat/completions", json=body, timeout=300)
    assert strict.status_code == 400 and "/properties/r/format" in strict.text, strict.text[:500]
    reply = server["client"].chat.completions.create(
        model=server["model"], messages=MESSAGES, tools=tools, tool_choice="required", max_tokens=48, seed=3,
        extra_body={"vllm_xargs": {LENIENT_XARG: True}},
    )  # fmt: skip
    calls = [(tc.function.name, tc.function.arguments) for tc in reply.choices[0].message.tool_calls or []]
    assert calls, reply
    loaded = [{"type": "function", "function": {"name": "area", "parameters": {
        "type": "object", "properties": {"r": {"type": "number"}}, "required": ["r"]}}}]  # fmt: skip
    check_calls(calls, loaded)
    _alive(server)


def _hostile_bodies(model: str) -> dict[str, tuple[dict[str, Any], str]]:
    tools = _tools()
    base = {"model": model, "messages": MESSAGES, "max_tokens": 16}
    deep = functools.reduce(
        lambda inner, _: {"type": "object", "properties": {"x": inner}, "required": ["x"]},
        range(80),
        {"type": "string"},
    )
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)}}
    bounded = _bounded_rows(min_items=200)  # every item required: nothing to build an item at a time

    def one(name: str, parameters: Any) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": name, "parameters": parameters}}]

    return {
        "module path as format": (
            {**base, "vllm_xargs": {"toolgrammar": json.dumps({"tools": tools, "format": "os:abort"})}},
            "registered format",
        ),
        "module path as format, exit": (
            {**base, "vllm_xargs": {"toolgrammar": json.dumps({"tools": tools, "format": "sys:exit"})}},
            "registered format",
        ),
        "spec beside tools": ({**base, "tools": tools, "vllm_xargs": {"toolgrammar": "{}"}}, "remove vllm_xargs"),
        "unknown type": (
            {**base, "tools": one("f", {"type": "object", "properties": {"a": {"type": "strin"}}})},
            "strin",
        ),
        "schema not an object": (
            {**base, "tools": one("f", {"type": "object", "properties": {"a": 7}})},
            "/properties/a",
        ),
        "deep schema": ({**base, "tools": one("f", deep)}, "deeper than"),
        "wide schema": ({**base, "tools": one("f", wide), "tool_choice": "required"}, "too large"),
        "bounded array": ({**base, "tools": one("f", bounded)}, "too large"),
        "response_format beside tools": (
            {**base, "tools": tools, "response_format": {"type": "json_object"}},
            "response_format",
        ),
        "tool_choice of a wrong type": ({**base, "tools": tools, "tool_choice": 123}, "tool_choice"),
        "unknown named tool": (
            {**base, "tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        "tools of a wrong type": ({**base, "tools": "run_tests"}, "tools"),
        "steering neither on nor off": (
            {**base, "tools": tools, "vllm_xargs": {"toolgrammar_steer_to_blocks": "perhaps"}},
            "must be true or false",
        ),
        "lenient loading neither on nor off": (
            {**base, "tools": tools, "vllm_xargs": {"toolgrammar_lenient_schemas": [1]}},
            "must be true or false",
        ),
    }


def _bounded_rows(min_items: int = 0) -> dict[str, Any]:
    """Up to 200 objects of three required properties."""
    return {
        "type": "object",
        "properties": {"rows": {"type": "array", "minItems": min_items, "maxItems": 200, "items": {
            "type": "object", "required": ["x", "y", "z"],
            "properties": {"x": {"type": "string"}, "y": {"type": "integer"}, "z": {"type": "boolean"}}}}},
        "required": ["rows"],
    }  # fmt: skip


def test_a_long_bounded_array_is_served_and_its_calls_are_valid(server: dict[str, Any]) -> None:
    """``maxItems`` 200 of objects (refused before it was built an item at a time): a plain OpenAI request
    with it gets valid calls."""
    tools = [{"type": "function", "function": {"name": "put_rows", "parameters": _bounded_rows()}}]
    reply = server["client"].chat.completions.create(
        model=server["model"], messages=MESSAGES, tools=tools, tool_choice="required", max_tokens=160, seed=5
    )
    calls = [(tc.function.name, tc.function.arguments) for tc in reply.choices[0].message.tool_calls or []]
    assert calls, reply
    check_calls(calls, tools)
    _alive(server)


def test_hostile_requests_get_400_and_the_server_keeps_serving(server: dict[str, Any]) -> None:
    import httpx

    for name, (body, words) in _hostile_bodies(server["model"]).items():
        response = httpx.post(f"{server['base']}/v1/chat/completions", json=body, timeout=300)
        assert response.status_code == 400, (name, response.status_code, response.text[:500])
        assert words in response.text, (name, response.text[:500])
        _alive(server)
    reply = _create(server, tool_choice="required", max_tokens=48, seed=3)
    assert reply.choices[0].message.tool_calls


def test_concurrent_requests_with_a_hostile_one_in_between(server: dict[str, Any]) -> None:
    """Eight requests at once (mixed choices, streaming and not), one hostile request among them."""
    import httpx

    tools = _tools()
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def good(i: int) -> None:
        try:
            choice = ["required", {"type": "function", "function": {"name": "read_file"}}][i % 2]
            kwargs = {"tool_choice": choice, "max_tokens": 64, "seed": 100 + i}
            results[i] = _stream(server, **kwargs) if i % 4 < 2 else _create(server, **kwargs)
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    def hostile() -> None:
        body, _ = _hostile_bodies(server["model"])["module path as format"]
        results[-1] = httpx.post(f"{server['base']}/v1/chat/completions", json=body, timeout=300).status_code

    threads = [threading.Thread(target=good, args=(i,)) for i in range(8)]
    threads.insert(4, threading.Thread(target=hostile))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert results.pop(-1) == 400
    for i, result in sorted(results.items()):
        if isinstance(result, dict):
            calls = result["calls"]
        else:
            calls = [(tc.function.name, tc.function.arguments) for tc in result.choices[0].message.tool_calls or []]
        assert calls, (i, result)
        check_calls(calls, tools)
        if i % 2:
            assert {name for name, _ in calls} == {"read_file"}
    _alive(server)
