"""A real vLLM OpenAI server with the toolgrammar tool-parser plugin, driven by the ``openai`` client.

Runs in the vLLM environment only (``scripts/test-vllm.sh``). One server start for the module (the
tiny random Qwen3 on the CPU, about 40 s): the exact command the README gives, with no
``vllm_xargs`` in any request. Every returned call is checked twice: rendered as the format's
block and parsed by the strict parser, and its arguments validated with ``jsonschema`` against the
tool's schema. Hostile requests get HTTP 400 and the server keeps serving.

Also: the request parameters the constraint takes over (``stop`` and ``stop_token_ids``, honoured only where the
turn may end; a prefilled assistant message with ``continue_final_message``) or refuses (a budget below the forced
call, ``ignore_eos``, ``include_stop_str_in_output``, ``min_tokens`` above 1, a prefill the grammar
cannot continue), and a seeded soak of mixed requests that checks every answer and the server's memory.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
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
FORMATS = {"toolgrammar_hermes": "hermes", "toolgrammar_qwen_xml": "qwen-xml"}
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_", "131072")}
"""glibc's allocator with a fixed mmap threshold, so the server's RSS is the memory it holds (the soak measures it).

By default glibc raises the threshold each time a large block is freed, after which blocks of that size come from
the heap and stay resident once freed: the engine core's RSS then climbs by hundreds of MB over a few hundred
constrained requests (the processor's per-step arrays of a vocabulary's width) and levels off only slowly, while
``malloc_trim(0)`` hands it all back (measured: 2712 -> 2162 MiB). A fixed threshold (128 KiB, glibc's default
start) maps and unmaps such blocks, as tcmalloc or jemalloc would (vLLM's CPU guide preloads tcmalloc)."""


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from toolgrammar.testing.vllm_server import ServerError, start_openai_server, stop_server, write_tiny_random_qwen3

    parser = request.param
    model = write_tiny_random_qwen3(tmp_path_factory.mktemp("model"))
    log = tmp_path_factory.mktemp("log") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), **MALLOC_ENV}
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
        yield {"client": client, "base": base, "model": str(model), "proc": proc, "log": log,
               "parser": parser, "format": FORMATS[parser]}  # fmt: skip
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
    """A chat completion (``MESSAGES`` and the seed tools unless ``messages``/``tools`` are given)."""
    kwargs.setdefault("messages", MESSAGES)
    kwargs.setdefault("tools", _tools())
    return server["client"].chat.completions.create(model=server["model"], **kwargs)


def _stream_choices(server: dict[str, Any], **kwargs: Any) -> tuple[dict[int, dict[str, Any]], Any]:
    """A streamed completion, accumulated as an OpenAI client would: each choice by its index, and the usage
    (sent when ``stream_options={"include_usage": True}``)."""
    acc: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in _create(server, stream=True, **kwargs):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            entry = acc.setdefault(choice.index, {"content": "", "calls": {}, "finish": None})
            entry["finish"] = choice.finish_reason or entry["finish"]
            entry["content"] += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                call = entry["calls"].setdefault(tc.index, {"name": "", "arguments": ""})
                call["name"] += (tc.function.name or "") if tc.function else ""
                call["arguments"] += (tc.function.arguments or "") if tc.function else ""
    out = {
        index: {
            "content": entry["content"] or None,
            "calls": [(c["name"], c["arguments"]) for _, c in sorted(entry["calls"].items())],
            "finish": entry["finish"],
        }
        for index, entry in acc.items()
    }
    return out, usage


def _stream(server: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A streamed completion of one choice, accumulated as an OpenAI client would."""
    choices, _ = _stream_choices(server, **kwargs)
    return choices.get(0, {"content": None, "calls": [], "finish": None})


def _whole(reply: Any, index: int = 0) -> dict[str, Any]:
    """A non-streamed completion's choice in :func:`_stream`'s shape (``""`` content as ``None``, as streamed)."""
    choice = reply.choices[index]
    message = choice.message
    calls = [(tc.function.name, tc.function.arguments) for tc in message.tool_calls or []]
    return {"content": message.content or None, "calls": calls, "finish": choice.finish_reason}


def _same_answer(streamed: dict[str, Any], whole: dict[str, Any]) -> None:
    """A stream adds up to the non-streamed answer of the same seed: content and calls. (Not finish_reason: vLLM
    reports "tool_calls" for a whole turn with calls that ran out of budget, "length" for the same stream.)"""
    assert (streamed["content"], streamed["calls"]) == (whole["content"], whole["calls"]), (streamed, whole)


def _post(server: dict[str, Any], body: dict[str, Any]) -> Any:
    import httpx

    return httpx.post(f"{server['base']}/v1/chat/completions", json=body, timeout=300)


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


def test_arguments_stream_as_fragments_the_sdk_accumulates(server: dict[str, Any]) -> None:
    """A call streams the OpenAI way: a first delta with index, id, type and name, then argument fragments, each
    final; the raw deltas and the ``openai`` SDK's own accumulation (``chat.completions.stream``) both add up to
    the non-streamed call of the same seed, byte for byte."""
    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    kwargs = {"tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 160, "extra_body": thinking_off}
    fragments = 0
    for seed in (11, 12, 13):
        whole = _whole(_create(server, seed=seed, **kwargs))
        assert whole["calls"], whole
        check_calls(whole["calls"], _tools())
        calls: dict[int, dict[str, Any]] = {}
        for chunk in _create(server, seed=seed, stream=True, **kwargs):
            for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                if tc.index not in calls:  # the call's first delta: everything a client needs to show it
                    assert tc.id and tc.type == "function" and tc.function and tc.function.name, tc
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "pieces": []}
                else:
                    assert not tc.function.name and tc.id in (None, calls[tc.index]["id"]), tc
                calls[tc.index]["pieces"].append(tc.function.arguments or "")
        streamed = [(c["name"], "".join(c["pieces"])) for _, c in sorted(calls.items())]
        assert streamed == whole["calls"]
        fragments = max(fragments, *(sum(1 for piece in c["pieces"] if piece) for c in calls.values()))
        with server["client"].chat.completions.stream(
            model=server["model"], messages=MESSAGES, tools=_tools(), seed=seed, **kwargs
        ) as stream:
            kinds = {event.type for event in stream}
            # The accumulated snapshot (get_final_completion refuses a turn the budget ended: the random model
            # writes its arguments on until the budget closes the call).
            final = stream.current_completion_snapshot
        sdk = [(tc.function.name, tc.function.arguments) for tc in final.choices[0].message.tool_calls or []]
        assert sdk == whole["calls"]
        assert "tool_calls.function.arguments.delta" in kinds and "tool_calls.function.arguments.done" in kinds
    assert fragments > 3, "no call's arguments came in several fragments"
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


# -- the request parameters the constraint takes over or refuses -----------------------------------------------------

READ_FILE = {"type": "function", "function": {"name": "read_file"}}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}

STOP_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # Text (and tokens) that every call of the format writes: (hermes, qwen-xml). Qwen3's ids: 92 "}", 1 '"',
    # 9207 '"}', 3417 "}}", 29 ">", 28 "=", 397 ">\n", 198 "\n", 151658 "</tool_call>" (the block's closer).
    "a bracket": ({"stop": ["}"]}, {"stop": [">"]}),
    "a quote": ({"stop": ['"']}, {"stop": ["="]}),
    "the closer and a newline": ({"stop": ["</tool_call>", "\n"]}, {"stop": ["</function>", "\n"]}),
    "token ids": ({"extra_body": {"stop_token_ids": [92, 1, 9207, 3417, 151658]}},
                  {"extra_body": {"stop_token_ids": [29, 28, 397, 198, 151658]}}),
}  # fmt: skip


END_OF_TURN = (151643, 151645)
"""Qwen3's ``<|endoftext|>`` and ``<|im_end|>``."""


@functools.cache
def _tokenizer() -> Any:
    """The server model's tokenizer (the real Qwen3 one), to read the token ids a reply returns."""
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer

    return load_qwen3_tokenizer()


def _merged(*parts: dict[str, Any]) -> dict[str, Any]:
    """Request keyword arguments, their ``extra_body`` dicts merged."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = {**out.get(key, {}), **value} if key == "extra_body" else value
    return out


def _check_forced(got: dict[str, Any], tools: list[dict[str, Any]], *, named: str | None = None) -> None:
    """A reply to ``required`` or a named tool: a call was made, complete (parsed into ``tool_calls``) and valid,
    and no block markup was left in content (a cut block stays there, verbatim)."""
    assert got["calls"], f"no call: {got!r}"
    check_calls(got["calls"], tools)
    if named is not None:
        assert {name for name, _ in got["calls"]} == {named}, got
    assert "<tool_call>" not in (got["content"] or ""), got


@pytest.mark.parametrize("case", list(STOP_CASES))
def test_stops_that_a_call_contains_do_not_cut_it(server: dict[str, Any], case: str) -> None:
    """``stop``/``stop_token_ids`` holding text every call writes: inside the call they are plain text, so the
    call comes back whole and valid (vLLM used to stop inside it: a 200 with the half call left in content);
    the stream adds up to the same answer."""
    stops = STOP_CASES[case][server["format"] == "qwen-xml"]
    stop_ids = stops.get("extra_body", {}).get("stop_token_ids", [])
    tools = _tools()
    for choice, seed, thinking in (("required", 5, False), ("required", 5, True), (READ_FILE, 6, False)):
        kwargs = _merged({"tool_choice": choice, "max_tokens": 80, "seed": seed,
                          "extra_body": {"chat_template_kwargs": {"enable_thinking": thinking}}}, stops)  # fmt: skip
        reply = _create(server, **_merged(kwargs, {"extra_body": {"return_token_ids": True}}))
        whole = _whole(reply)
        _check_forced(whole, tools, named="read_file" if isinstance(choice, dict) else None)
        assert reply.usage.completion_tokens <= 80
        # The case tests what it says: the stop occurs inside the call, where the engine would have cut it.
        ids = reply.choices[0].token_ids
        text = _tokenizer().decode(ids, skip_special_tokens=False)
        call = text[text.index("<tool_call>") : text.rindex("</tool_call>")]
        assert any(s in call for s in stops.get("stop", [])) or set(ids) & set(stop_ids), (text, ids)
        _same_answer(_stream(server, **kwargs), whole)
    _alive(server)


def test_stops_end_the_turn_where_it_may_end(server: dict[str, Any]) -> None:
    """In free text under ``auto`` a stop still ends the turn: finish_reason ``stop``, the stop's text not written."""
    for stop, seeds in ((["e"], (1, 2, 3)), ([" ", "a"], (1, 3))):
        for seed in seeds:
            kwargs = _merged(
                {"tool_choice": "auto", "max_tokens": 64, "seed": seed, "stop": stop}, {"extra_body": NO_THINKING}
            )
            whole = _whole(_create(server, **kwargs))
            assert whole["finish"] == "stop" and not whole["calls"], whole
            assert not any(s in (whole["content"] or "") for s in stop), whole
            streamed = _stream(server, **kwargs)
            _same_answer(streamed, whole)
            assert streamed["finish"] == "stop", streamed
    _alive(server)


def _need(server: dict[str, Any], body: dict[str, Any]) -> int:
    """The minimum budget the server names for ``body`` (sent with ``max_tokens=1``): asserts the 400 says so."""
    import re

    response = _post(server, {**body, "max_tokens": 1})
    assert response.status_code == 400, response.text[:500]
    message = response.json()["error"]["message"]
    assert "max_tokens=1" in message and "max_completion_tokens" in message, message
    return int(re.search(r"to at least (\d+)", message).group(1))


@pytest.mark.parametrize("choice", ["required", READ_FILE], ids=["required", "named"])
def test_a_budget_below_the_shortest_call_is_refused(server: dict[str, Any], choice: Any) -> None:
    """``max_tokens``/``max_completion_tokens`` below the tokens the shortest forced call needs: HTTP 400 naming
    the parameter and the minimum (it used to be a 200 with a cut call). At exactly the minimum the call is
    complete; under ``auto`` there is no minimum."""
    tools = _tools()
    base = {"model": server["model"], "messages": MESSAGES, "tools": tools, "tool_choice": choice}
    need = _need(server, base)
    assert need > 1
    for key in ("max_tokens", "max_completion_tokens"):
        response = _post(server, {**base, key: need - 1})
        assert response.status_code == 400, (key, response.text[:500])
        assert f"max_tokens={need - 1}" in response.text and f"at least {need}" in response.text, response.text
    named = "read_file" if isinstance(choice, dict) else None
    for seed in (0, 1):
        for key in ("max_tokens", "max_completion_tokens"):
            kwargs = {"tool_choice": choice, key: need, "seed": seed}
            reply = _create(server, **kwargs)
            whole = _whole(reply)
            _check_forced(whole, tools, named=named)
            assert reply.usage.completion_tokens <= need
            _same_answer(_stream(server, **kwargs), whole)
    reply = _create(server, tool_choice="auto", max_tokens=1, seed=0)
    assert reply.usage.completion_tokens <= 1
    _alive(server)


def test_ignore_eos_and_include_stop_str_are_refused(server: dict[str, Any]) -> None:
    for key in ("ignore_eos", "include_stop_str_in_output"):
        for choice in ("auto", "required"):
            body = {"model": server["model"], "messages": MESSAGES, "tools": _tools(), "tool_choice": choice,
                    "max_tokens": 32, key: True}  # fmt: skip
            response = _post(server, body)
            assert response.status_code == 400 and f"{key}=true" in response.text, (key, choice, response.text[:500])
    # Without tools they are the engine's business, as before.
    response = _post(server, {"model": server["model"], "messages": MESSAGES, "max_tokens": 4, "ignore_eos": True})
    assert response.status_code == 200, response.text[:500]
    _alive(server)


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_min_tokens_that_could_hold_a_turn_past_its_end_is_refused(server: dict[str, Any], choice: str) -> None:
    """``min_tokens`` above 1 could hold the model past the end of a turn whose call is complete sooner (no bound
    known ahead is safe): 400 naming min_tokens and the most it may be. At 1 the request is served, its calls valid."""
    import re

    tools = _tools()
    base = {"model": server["model"], "messages": MESSAGES, "tools": tools, "tool_choice": choice, "max_tokens": 96}
    need = 1
    response = _post(server, {**base, "min_tokens": need + 1})
    assert response.status_code == 400, response.text[:500]
    message = response.json()["error"]["message"]
    assert f"min_tokens={need + 1}" in message, message
    assert int(re.search(r"at most (\d+)", message).group(1)) == need, message
    for seed in (0, 1, 2):
        kwargs = {"tool_choice": choice, "max_tokens": 96, "seed": seed, "extra_body": {"min_tokens": need}}
        reply = _create(server, **kwargs)
        whole = _whole(reply)
        check_calls(whole["calls"], tools)
        if choice == "required":
            _check_forced(whole, tools)
        assert need <= reply.usage.completion_tokens <= 96
        _same_answer(_stream(server, **kwargs), whole)
    _alive(server)


PREFILLS = {
    "hermes": '<tool_call>\n{"name": "read_file", "arguments": {"path": "',
    "qwen-xml": "<tool_call>\n<function=read_file>\n<parameter=path>\n",
}
IMPOSSIBLE_PREFILLS = {
    # no tool's name starts with "nope"; read_file has no parameter "nope"; its path is a string
    "hermes": ['<tool_call>\n{"name": "nope', '<tool_call>\n{"name": "read_file", "arguments": {"path": 7'],
    "qwen-xml": ["<tool_call>\n<function=nope", "<tool_call>\n<function=read_file>\n<parameter=nope"],
}


def _prefilled(prefill: str) -> dict[str, Any]:
    """Keyword arguments that continue an assistant message ``prefill``."""
    return {
        "messages": [*MESSAGES, {"role": "assistant", "content": prefill}],
        "extra_body": {"continue_final_message": True, "add_generation_prompt": False},
    }


@pytest.mark.parametrize("thinking", THINKING, ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("choice", ["auto", "required", READ_FILE], ids=["auto", "required", "named"])
def test_a_prefilled_call_is_continued_and_parsed(server: dict[str, Any], choice: Any, thinking: bool) -> None:
    """A prefilled assistant message that opens a ``read_file`` call, with ``continue_final_message``: the grammar
    goes on from the prefill, and the parser reads prefill and continuation as one turn, so the call comes back
    in ``tool_calls``, streamed and not (it used to start a fresh turn mid-string: no call, or a wrong one)."""
    from toolgrammar.turn.parser import parse_turn

    tools = _tools()
    prefill = PREFILLS[server["format"]]
    for seed in (3, 4):
        kwargs = _merged(
            {"tool_choice": choice, "max_tokens": 64, "seed": seed,
             "extra_body": {"chat_template_kwargs": {"enable_thinking": thinking}}},
            _prefilled(prefill),
        )  # fmt: skip
        reply = _create(server, **_merged(kwargs, {"extra_body": {"return_token_ids": True}}))
        whole = _whole(reply)
        _check_forced(whole, tools)
        assert whole["calls"][0][0] == "read_file", whole
        assert prefill.strip() not in (whole["content"] or ""), whole
        # The model continued the prefill (not a fresh turn): prefill + continuation is the turn, read_file first.
        ids = [i for i in reply.choices[0].token_ids if i not in END_OF_TURN]
        continuation = _tokenizer().decode(ids, skip_special_tokens=False)
        turn = parse_turn(prefill + continuation, tools, format=server["format"])
        assert turn.tool_calls and turn.tool_calls[0].name == "read_file", (continuation, turn.errors)
        assert turn.tool_calls[0].arguments_json() == whole["calls"][0][1], (continuation, whole)
        assert reply.usage.completion_tokens <= 64
        _same_answer(_stream(server, **kwargs), whole)
    _alive(server)


COMPLETE_CALLS = {
    "hermes": '<tool_call>\n{"name": "run_tests", "arguments": {}}\n</tool_call>\n',
    "qwen-xml": "<tool_call>\n<function=run_tests>\n</function>\n</tool_call>\n",
}


def test_a_prefill_that_opens_a_block_is_continued(server: dict[str, Any]) -> None:
    """A prefill that ends inside the block opener, or after text and the opener: the prefill's text is not
    content, a call the continuation finishes comes back whole, and the stream adds up to the same (where the
    prefill cut the opener, the stream used to send the call's text as content). Under ``auto`` a cut opener may
    also be text (the model may go on with anything but ``call>``); under ``required`` it must be the call's."""
    tools = _tools()
    cases = (("required", "<tool_", 2), ("required", "<tool_", 4), ("auto", "<tool_", 1),
             ("auto", "Let me look. <tool_call>", 3))  # fmt: skip
    for choice, prefill, seed in cases:
        kwargs = _merged({"tool_choice": choice, "max_tokens": 64, "seed": seed}, _prefilled(prefill))
        whole = _whole(_create(server, **kwargs))
        check_calls(whole["calls"], tools)
        if choice == "required" or prefill.endswith(">"):
            _check_forced(whole, tools)
        assert "Let me look" not in (whole["content"] or ""), whole
        _same_answer(_stream(server, **kwargs), whole)
    _alive(server)


def test_a_call_wholly_in_the_prefill_is_not_returned(server: dict[str, Any]) -> None:
    """A prefill that holds a whole call and opens another: the reply holds the calls the continuation wrote or
    finished, the same streamed and not (the whole reply used to hold the prefilled call too, the stream not)."""
    tools = _tools()
    prefill = COMPLETE_CALLS[server["format"]] + PREFILLS[server["format"]]
    for seed in (1, 2):
        kwargs = _merged({"tool_choice": "required", "max_tokens": 64, "seed": seed}, _prefilled(prefill))
        whole = _whole(_create(server, **kwargs))
        _check_forced(whole, tools)
        assert whole["calls"][0][0] == "read_file", whole
        _same_answer(_stream(server, **kwargs), whole)
    _alive(server)


def _prefill_body(server: dict[str, Any], prefill: str, **fields: Any) -> dict[str, Any]:
    """A raw request body that continues the assistant message ``prefill``."""
    kwargs = _prefilled(prefill)
    return {
        "model": server["model"],
        "tools": _tools(),
        "messages": kwargs["messages"],
        **kwargs["extra_body"],
        **fields,
    }


def test_a_prefill_the_grammar_cannot_continue_is_refused(server: dict[str, Any]) -> None:
    """A prefill no turn of these tools starts with (an unknown tool, an unknown parameter, a number for a string),
    or a call of another tool than the named one: 400, and the server keeps serving."""
    grep = {"type": "function", "function": {"name": "grep"}}
    cases = [*(("auto", p) for p in IMPOSSIBLE_PREFILLS[server["format"]]), (grep, PREFILLS[server["format"]])]
    for choice, prefill in cases:
        response = _post(server, _prefill_body(server, prefill, tool_choice=choice, max_tokens=64))
        assert response.status_code == 400, (prefill, response.text[:500])
        assert "prefilled assistant message" in response.text and "cannot be continued" in response.text, response.text
    _alive(server)


# -- soak -------------------------------------------------------------------------------------------------------------

WORDS = ("alpha", "beta", "gamma", "delta", "path", "mode", "count", "limit", "name", "tags", "items", "query",
         "color", "size", "level", "owner", "target", "depth")  # fmt: skip


def _random_schema(rng: random.Random, depth: int) -> dict[str, Any]:
    """A small JSON schema: a string (perhaps bounded), an integer (perhaps ranged), a number, a boolean, an enum,
    and above the leaves an object of one or two properties or an array of up to three items."""
    kinds = ["string", "integer", "number", "boolean", "enum"] + (["object", "array"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", **({"maxLength": rng.choice([4, 12])} if rng.random() < 0.3 else {})}
    if kind == "integer":
        return {"type": "integer", **({"minimum": -5, "maximum": 500} if rng.random() < 0.5 else {})}
    if kind == "enum":
        return {"type": "string", "enum": rng.sample(["red", "green", "blue", "on", "off", "a b"], rng.randint(1, 4))}
    if kind == "object":
        names = rng.sample(WORDS, rng.randint(1, 2))
        return {"type": "object", "properties": {n: _random_schema(rng, depth + 1) for n in names},
                "required": names[: rng.randint(0, len(names))]}  # fmt: skip
    if kind == "array":
        return {"type": "array", "items": _random_schema(rng, depth + 1), "maxItems": rng.randint(1, 3)}
    return {"type": kind}


def _random_tools(rng: random.Random, index: int) -> list[dict[str, Any]]:
    """One to four tools of up to three parameters (at most two required), named uniquely."""
    tools = []
    for t in range(rng.randint(1, 4)):
        names = rng.sample(WORDS, rng.randint(0, 3))
        parameters = {"type": "object", "properties": {n: _random_schema(rng, 1) for n in names},
                      "required": names[: rng.randint(0, min(2, len(names)))]}  # fmt: skip
        name = f"{rng.choice(['get', 'set', 'find', 'make'])}_{rng.choice(WORDS)}_{index}{t}"
        tools.append(
            {"type": "function", "function": {"name": name, "description": f"Tool {t}.", "parameters": parameters}}
        )
    return tools


def _opening(fmt: str, name: str) -> str:
    """A prefill that opens a call of ``name`` in format ``fmt``."""
    return (
        f'<tool_call>\n{{"name": "{name}", "arguments": {{' if fmt == "hermes" else f"<tool_call>\n<function={name}>\n"
    )


def _rss(pid: int) -> int:
    """Resident memory of the server process and its children (vLLM's engine core is a child), in bytes."""
    try:
        import psutil

        root = psutil.Process(pid)
        total = 0
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += proc.memory_info().rss
        return total
    except ImportError:  # /proc: the process and its children, one level at a time
        total, pending = 0, [pid]
        while pending:
            current = pending.pop()
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
        return total


SOAK_REQUESTS = 160
SOAK_THREADS = 3
SOAK_SAMPLE_EVERY = 20
SOAK_LISTS = 4
"""Tool lists in the soak's pool: a server sees a bounded set of tool lists, so its caches fill and stop growing."""


def _soak_plans(rng: random.Random, server: dict[str, Any], pool: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The soak's requests, drawn up front from ``rng`` (the same every run)."""
    hostile = [*_hostile_bodies(server["model"]).items(), *_admission_bodies(server).items()]
    plans = []
    for i in range(SOAK_REQUESTS):
        if rng.random() < 0.15:
            name, (body, words) = rng.choice(hostile)
            plans.append({"kind": "hostile", "name": name, "body": body, "words": words})
            continue
        entry = rng.choice(pool)
        tools, names = entry["tools"], [t["function"]["name"] for t in entry["tools"]]
        choice = rng.choice(["auto", "required", "named", "none"])
        named = names[rng.randint(0, min(1, len(names) - 1))] if choice == "named" else None
        prefill = choice in ("auto", "required") and rng.random() < 0.15
        key = (named or choice) + (":prefill" if prefill else "")
        need = entry["need"].get(key, 0)
        stream = rng.random() < 0.5
        plan: dict[str, Any] = {
            "kind": "good", "i": i, "tools": tools, "choice": choice, "named": named,
            "tool_choice": {"type": "function", "function": {"name": named}} if named else choice,
            "parallel": rng.random() < 0.6, "stream": stream, "n": 2 if rng.random() < 0.2 else 1,
            "max_tokens": need + rng.randint(0, 64) if need else rng.randint(1, 96),
            "stop": rng.choice([None, None, ["}"], ['"', "\n"], [">"], ["e"]]),
            "prefill": _opening(server["format"], names[0]) if prefill else None,
            "disconnect": stream and rng.random() < 0.15, "seed": rng.randint(0, 1 << 20),
            "thinking": entry["thinking"],
        }  # fmt: skip
        if rng.random() < 0.2:
            plan["min_tokens"] = rng.randint(0, 1)
        plans.append(plan)
    return plans


def _admission_bodies(server: dict[str, Any]) -> dict[str, tuple[dict[str, Any], str]]:
    """Requests the constraint refuses up front: the budget, ignore_eos, include_stop_str, min_tokens, a prefill."""
    base = {"model": server["model"], "messages": MESSAGES, "tools": _tools(), "max_tokens": 64}
    impossible = IMPOSSIBLE_PREFILLS[server["format"]][0]
    return {
        "budget below the call": ({**base, "tool_choice": "required", "max_tokens": 3}, "max_tokens=3"),
        "budget below the named call": ({**base, "tool_choice": READ_FILE, "max_completion_tokens": 2}, "max_tokens=2"),
        "ignore_eos": ({**base, "ignore_eos": True}, "ignore_eos"),
        "include_stop_str_in_output": ({**base, "include_stop_str_in_output": True}, "include_stop_str_in_output"),
        "min_tokens past the turn": ({**base, "tool_choice": "auto", "min_tokens": 2}, "min_tokens=2"),
        "min_tokens past the call": ({**base, "tool_choice": "required", "min_tokens": 60}, "min_tokens=60"),
        "impossible prefill": (_prefill_body(server, impossible, max_tokens=32), "cannot be continued"),
    }


def _soak_request(server: dict[str, Any], plan: dict[str, Any]) -> tuple[str, list[dict[str, Any]], Any]:
    """Send one good plan; returns how it went ("ok", "disconnected") with its choices and usage."""
    extra: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": plan["thinking"]}}
    messages = MESSAGES
    if plan["prefill"]:
        messages = [*MESSAGES, {"role": "assistant", "content": plan["prefill"]}]
        extra |= {"continue_final_message": True, "add_generation_prompt": False}
    if "min_tokens" in plan:
        extra["min_tokens"] = plan["min_tokens"]
    kwargs: dict[str, Any] = {
        "messages": messages, "tools": plan["tools"], "tool_choice": plan["tool_choice"],
        "parallel_tool_calls": plan["parallel"], "n": plan["n"], "max_tokens": plan["max_tokens"],
        "seed": plan["seed"], "extra_body": extra, **({"stop": plan["stop"]} if plan["stop"] else {}),
    }  # fmt: skip
    if plan["disconnect"]:
        stream = _create(server, stream=True, **kwargs)
        for j, _ in enumerate(stream):
            if j >= 3:
                break
        stream.close()
        return "disconnected", [], None
    if plan["stream"]:
        choices, usage = _stream_choices(server, stream_options={"include_usage": True}, **kwargs)
        return "ok", [choices[k] for k in sorted(choices)], usage
    reply = _create(server, **kwargs)
    return "ok", [_whole(reply, k) for k in range(len(reply.choices))], reply.usage


def _check_soak_reply(plan: dict[str, Any], choices: list[dict[str, Any]], usage: Any) -> None:
    assert len(choices) == plan["n"], choices
    for got in choices:
        check_calls(got["calls"], plan["tools"])
        if plan["choice"] == "none":
            assert not got["calls"], got
        if plan["choice"] in ("required", "named"):
            _check_forced(got, plan["tools"], named=plan["named"])
        if not plan["parallel"]:
            assert len(got["calls"]) <= 1, got
        if plan["prefill"]:  # the prefill opened a call of the first tool
            assert got["calls"] and got["calls"][0][0] == plan["tools"][0]["function"]["name"], got
    assert usage is not None and usage.completion_tokens <= plan["n"] * plan["max_tokens"], usage


def _soak_pool(server: dict[str, Any], rng: random.Random) -> list[dict[str, Any]]:
    """The tool lists, each with the budgets its forced calls need, read from the server's own 400s (which also
    warms the server up: every grammar the soak uses is compiled here, before memory is measured)."""
    pool = []
    for index in range(SOAK_LISTS):
        tools = _random_tools(rng, index)
        thinking = index % 2 == 0
        entry = {"tools": tools, "thinking": thinking, "need": {}}
        names = [t["function"]["name"] for t in tools]
        base = {"model": server["model"], "messages": MESSAGES, "tools": tools,
                "chat_template_kwargs": {"enable_thinking": thinking}}  # fmt: skip
        choices: dict[str, Any] = {"auto": "auto", "none": "none", "required": "required"}
        choices |= {n: {"type": "function", "function": {"name": n}} for n in names[:2]}
        for key, choice in choices.items():
            if key not in ("auto", "none"):
                entry["need"][key] = _need(server, {**base, "tool_choice": choice})
        for key in ("auto", "required"):
            body = {**_prefill_body(server, _opening(server["format"], names[0]), tool_choice=key), "tools": tools,
                    "chat_template_kwargs": {"enable_thinking": thinking}}  # fmt: skip
            entry["need"][f"{key}:prefill"] = _need(server, body)
        for key, choice in choices.items():
            for parallel in (True, False):
                reply = _create(server, tools=tools, tool_choice=choice, parallel_tool_calls=parallel, seed=0,
                                max_tokens=entry["need"].get(key, 0) + 32,
                                extra_body={"chat_template_kwargs": {"enable_thinking": thinking}})  # fmt: skip
                check_calls(_whole(reply)["calls"], tools)
        pool.append(entry)
    return pool


def test_soak_mixed_requests_stay_right_and_memory_levels_off(server: dict[str, Any]) -> None:
    """A few threads send a seeded mix of requests: random tool lists (strings, integers, enums, nested objects,
    arrays), every tool_choice, parallel on and off, stops, n=2, prefills, streamed and not, streams dropped after a
    few chunks, and hostile requests. Every 200 is right, every hostile request a 400, and the server's memory
    (with its engine core) levels off."""
    rng = random.Random(20240607)
    pool = _soak_pool(server, rng)
    plans = _soak_plans(rng, server, pool)
    pid = server["proc"].pid
    samples = [_rss(pid)]
    lock = threading.Lock()
    counts = {"requests": 0, "200": 0, "400": 0, "disconnected": 0, "streamed": 0, "n=2": 0, "calls": 0}
    failures: list[str] = []
    todo = list(reversed(plans))

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                plan = todo.pop()
            try:
                if plan["kind"] == "hostile":
                    response = _post(server, plan["body"])
                    assert response.status_code == 400, (response.status_code, response.text[:300])
                    assert plan["words"] in response.text, response.text[:300]
                    outcome, got = "400", []
                else:
                    outcome, got, usage = _soak_request(server, plan)
                    if outcome == "ok":
                        _check_soak_reply(plan, got, usage)
                        outcome = "200"
            except Exception as error:
                with lock:
                    failures.append(f"{plan.get('name') or {k: v for k, v in plan.items() if k != 'tools'}}: {error!r}")
                outcome, got = "failed", []
            with lock:
                counts["requests"] += 1
                counts[outcome] = counts.get(outcome, 0) + 1
                counts["streamed"] += bool(plan.get("stream"))
                counts["n=2"] += plan.get("n") == 2
                counts["calls"] += sum(len(c["calls"]) for c in got)
                if counts["requests"] % SOAK_SAMPLE_EVERY == 0:
                    samples.append(_rss(pid))

    threads = [threading.Thread(target=work) for _ in range(SOAK_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mib = [round(s / 2**20) for s in samples]
    print(f"\nsoak [{server['parser']}]: {counts}; RSS MiB every {SOAK_SAMPLE_EVERY} requests: {mib}")
    assert not failures, "\n".join(failures[:20])
    assert counts["200"] + counts["400"] + counts["disconnected"] == SOAK_REQUESTS
    _alive(server)
    # Memory levels off. The pool's grammars were all compiled before the first sample, so what is left is per
    # request: a leak of it grows RSS the same in both halves, while allocator arenas and caches touched late
    # grow it mostly early. The last half may grow by half the first half's growth, or by 3% of the RSS (the
    # noise of a multi-GB pair of processes: glibc arenas of the serving threads, pages of the KV cache touched
    # late), whichever is larger; a leak of a few MB per request (a grammar, a mask) exceeds both.
    mid = len(samples) // 2
    first, last = samples[mid] - samples[0], samples[-1] - samples[mid]
    allowed = max(first / 2, 0.03 * samples[mid])
    assert last <= allowed, f"RSS grew {last / 2**20:.0f} MiB over the last half (first half {first / 2**20:.0f} MiB)"
