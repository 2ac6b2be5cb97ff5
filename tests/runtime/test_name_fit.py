"""The name fit (``toolgrammar.runtime.name_fit``): where names start in each format's calls, which tokens can
write a text next, and the score, against hand-computed values (a scripted model) and against a brute-force
reimplementation on the real Qwen3 tokenizer and the tiny random Qwen3 (no cache, every token scanned).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from toolgrammar.formats import get_format
from toolgrammar.runtime.name_fit import NameFitError, Spelling, call_targets, name_fit

torch = pytest.importorskip("torch")

# -- where a name starts -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "head", "end"),
    [
        ("hermes", '<tool_call>\n{"name": "', '"'),
        ("qwen-xml", "<tool_call>\n<function=", ">"),
        ("mistral", "[TOOL_CALLS]", "["),
        ("glm", "<tool_call>", "<"),
        ("llama4-pythonic", "[", "("),
    ],
)
def test_call_targets_per_format(fmt, head, end):
    got_head, targets = call_targets(get_format(fmt), ["get_weather", "get_time"])
    assert got_head == head
    assert targets == (f"{head}get_weather{end}", f"{head}get_time{end}")


def test_call_targets_refuses_what_it_cannot_read():
    class Shouting:
        name = "shouting"

        def render_call(self, tool, arguments):
            return f"<call>{tool.upper()}</call>"

    with pytest.raises(NameFitError, match="'shouting' does not write a tool's name into its call as given"):
        call_targets(Shouting(), ["get_weather"])

    class PerTool:
        name = "per-tool"

        def render_call(self, tool, arguments):
            return f"<{len(tool)}>{tool};"

    with pytest.raises(NameFitError, match=r"renders tool 'get_weather'.*'<11>get_weather;'"):
        call_targets(PerTool(), ["get_weather"])
    with pytest.raises(NameFitError, match="at least one tool name"):
        call_targets(get_format("hermes"), [])


# -- which tokens lead to a text ---------------------------------------------------------------------------


def _brute_leading_to(token_bytes, rests, exclude=()):
    return sorted(
        i
        for i, b in enumerate(token_bytes)
        if b and i not in exclude and any(r.startswith(b) or b.startswith(r) for r in rests)
    )


@pytest.mark.parametrize(
    "rests",
    [
        [b' "get_weather"'],
        [b'_weather"', b'_time"'],
        [b'"'],  # the end of a name: every token starting with a quote runs past it
        [b"\n<function=calculate_area>"],
        ['ä_größe"'.encode()],  # multi-byte characters: byte-level tokens may split them
    ],
)
def test_leading_to_equals_a_scan_of_the_real_vocabulary(qwen3_vocab, rests):
    eos = sorted(qwen3_vocab.eos_ids)
    spelling = Spelling.of(qwen3_vocab.token_bytes, exclude=eos)
    got = spelling.leading_to(rests)
    assert got == _brute_leading_to(qwen3_vocab.token_bytes, rests, set(eos))
    assert got and not set(got) & set(eos)


# -- the score: hand-computed ----------------------------------------------------------------------------

TOKENS = [b"<call>", b' "', b"get", b"_weather", b"_time", b'"', b'",', b"x", b' "get', b"zz"]
ID = {b: i for i, b in enumerate(TOKENS)}


class Fmt:
    name = "scripted"

    def render_call(self, tool, arguments):
        return f'<call> "{tool}", {{}}'


class Scripted:
    """A causal LM whose next-token distribution is a table keyed by the text written so far."""

    device = torch.device("cpu")

    def __init__(self, table: dict[bytes, dict[bytes, float]]):
        self.table = table
        self.calls: list[int] = []

    def forward(self, input_ids, past_key_values=None, use_cache=None, logits_to_keep=None):
        ids = (past_key_values or []) + input_ids[0].tolist()
        self.calls.append(len(input_ids[0]))
        written = b"".join(TOKENS[i] for i in ids).split(b"zz")[-1]  # "zz" ends the prompt
        probs = torch.full((len(TOKENS),), 1e-12, dtype=torch.float64)
        for token, p in self.table[written].items():
            probs[ID[token]] = p
        logits = torch.log(probs / probs.sum()).float()[None, None, :]

        class Out:
            pass

        out = Out()
        out.logits, out.past_key_values = logits, ids
        return out

    __call__ = forward


PROMPT = [ID[b"x"], ID[b"zz"]]
HEAD_IDS = [ID[b"<call>"], ID[b' "']]


def _score(table: dict[bytes, dict[bytes, float]]) -> tuple[float, Scripted]:
    head, targets = call_targets(Fmt(), ["get_weather", "get_time"])
    model = Scripted(table)
    return name_fit(model, PROMPT + HEAD_IDS, head, targets, Spelling.of(TOKENS)), model


def test_score_is_the_kept_mass_along_the_likeliest_path():
    table = {
        b"<call>": {b' "': 1.0},  # the head's last token, walked again: not counted
        b'<call> "': {b"get": 0.6, b"x": 0.4},  # 0.6 leads to an offered name
        b'<call> "get': {b"_weather": 0.5, b"_time": 0.2, b"x": 0.3},  # 0.7 does; _weather is followed
        b'<call> "get_weather': {b'",': 0.9, b"x": 0.1},  # a token running past the name's end counts
    }
    score, model = _score(table)
    assert score == pytest.approx(0.6 * 0.7 * 0.9, rel=1e-6)
    assert model.calls == [len(PROMPT) + 1, 1, 1, 1]  # the prompt and the head's first token once, then cached steps


def test_a_token_joining_head_and_name_counts_as_a_name_step():
    table = {
        b"<call>": {b' "get': 0.8, b' "': 0.15, b"x": 0.05},  # 0.95 leads on; the joined token is likelier
        b'<call> "get': {b"_time": 0.9, b"x": 0.1},
        b'<call> "get_time': {b'"': 1.0},
    }
    score, _ = _score(table)
    assert score == pytest.approx(0.95 * 0.9 * 1.0, rel=1e-6)


def test_a_model_meaning_another_tool_scores_low():
    table = {
        b"<call>": {b' "': 1.0},
        b'<call> "': {b"x": 0.97, b"get": 0.03},
        b'<call> "get': {b"_weather": 1.0},
        b'<call> "get_weather': {b'"': 1.0},
    }
    score, _ = _score(table)
    assert score == pytest.approx(0.03, rel=1e-6)


# -- the score: against a brute-force walk on the real tokenizer -----------------------------------------


def _brute_name_fit(model, prompt_ids, head: str, targets, token_bytes, eos) -> float:
    """The same walk with no cache (a full forward pass per step) and every token scanned per step."""
    wanted = [t.encode() for t in targets]
    head_b = head.encode()
    tail = token_bytes[prompt_ids[-1]]
    ids, written = list(prompt_ids[:-1]), head_b[: len(head_b) - len(tail)]
    assert head_b.endswith(tail)
    log_score = 0.0
    while not any(written.startswith(w) for w in wanted):
        rests = [w[len(written) :] for w in wanted if w.startswith(written)]
        allowed = _brute_leading_to(token_bytes, rests, eos)
        with torch.inference_mode():
            probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), dim=-1)
        best = max(allowed, key=lambda i: float(probs[i]))
        if len(written) + len(token_bytes[best]) > len(head_b):
            log_score += math.log(float(probs[allowed].sum()))
        written += token_bytes[best]
        ids.append(best)
    return math.exp(log_score)


def test_the_walk_equals_a_brute_force_one(qwen3_tokenizer, qwen3_vocab):
    from toolgrammar.evaluate.models import tiny_random_qwen3

    model = tiny_random_qwen3().eval()
    tools: list[dict[str, Any]] = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
        for n in ("get_weather", "get_time", "calculate_area")
    ]
    prompt = qwen3_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Weather in Paris?"}], tools=tools, add_generation_prompt=True,
        tokenize=False, enable_thinking=False,
    )  # fmt: skip
    eos = sorted(qwen3_vocab.eos_ids)
    spelling = Spelling.of(qwen3_vocab.token_bytes, exclude=eos)
    for fmt in ("hermes", "qwen-xml"):
        head, targets = call_targets(get_format(fmt), [t["function"]["name"] for t in tools])
        ids = qwen3_tokenizer.encode(prompt + head, add_special_tokens=False)
        assert ids[-len(qwen3_tokenizer.encode(head)) :][0] == qwen3_tokenizer.convert_tokens_to_ids("<tool_call>")
        got = name_fit(model, ids, head, targets, spelling)
        want = _brute_name_fit(model, ids, head, targets, qwen3_vocab.token_bytes, set(eos))
        assert 0.0 < got <= 1.0
        assert got == pytest.approx(want, rel=1e-4), fmt
