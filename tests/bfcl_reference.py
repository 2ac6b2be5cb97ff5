"""BFCL's own verdicts, for tests/evaluate/test_bfcl.py: run with the Python of a venv that has ``bfcl-eval`` installed.

Reads one JSON request on stdin and writes one JSON answer on stdout. Everything is BFCL 2026.3.23's
own code: ``load_dataset_entry`` / ``load_ground_truth_entry`` (bfcl_eval.utils), ``convert_to_tool``
(bfcl_eval.model_handler.utils), ``QwenFCHandler`` (decode_ast and _parse_query_response_prompting),
and ``eval_runner._evaluate_single_ast_entry`` / ``_evaluate_single_relevance_entry`` (which call
``ast_checker``). One module is replaced: ``bfcl_eval.constants.model_config``, whose only use on these
paths is ``MODEL_CONFIG_MAPPING[model].underscore_to_dot``; the real one imports every vendor SDK's
handler (anthropic, cohere, mistralai, google-genai, boto3, qwen-agent...). Two model names are
registered: ``toolgrammar`` (underscore_to_dot=True, as for OpenAI models) and ``toolgrammar-dots``
(False).

Request: ``{"categories": [...], "convert": [...], "cases": [{"category", "id", "text", "model"}]}``.
Answer: ``{"items": {category: [{"id", "function", "ground_truth"}]}, "tools": {category: {id: tools}},
"verdicts": [{"valid", "error_type"}]}``.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass


@dataclass
class _Config:
    underscore_to_dot: bool


_stub = types.ModuleType("bfcl_eval.constants.model_config")
_stub.MODEL_CONFIG_MAPPING = {"toolgrammar": _Config(True), "toolgrammar-dots": _Config(False)}  # type: ignore[attr-defined]
sys.modules["bfcl_eval.constants.model_config"] = _stub

from bfcl_eval.constants.enums import Language, ModelStyle, ReturnFormat  # noqa: E402
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI  # noqa: E402
from bfcl_eval.eval_checker import eval_runner  # noqa: E402
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler  # noqa: E402
from bfcl_eval.model_handler.utils import convert_to_tool  # noqa: E402
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry  # noqa: E402


class _Choice:
    def __init__(self, text: str):
        self.text = text


class _Usage:
    prompt_tokens = 0
    completion_tokens = 0


class _Response:
    def __init__(self, text: str):
        self.choices = [_Choice(text)]
        self.usage = _Usage()


def main() -> None:
    request = json.load(sys.stdin)
    handler = object.__new__(QwenFCHandler)  # decode_ast and the response parser use no instance state
    answer: dict = {"items": {}, "tools": {}, "verdicts": []}
    prompts: dict = {}
    truths: dict = {}
    for category in request["categories"]:
        entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
        prompts[category] = {e["id"]: e for e in entries}
        ground = {}
        if not eval_runner.is_relevance_or_irrelevance(category):
            ground = {g["id"]: g["ground_truth"] for g in load_ground_truth_entry(category)}
        truths[category] = ground
        answer["items"][category] = [
            {"id": e["id"], "question": e["question"], "function": e["function"], "ground_truth": ground.get(e["id"])}
            for e in entries
        ]
    for category in request["convert"]:
        entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
        answer["tools"][category] = {
            e["id"]: convert_to_tool(e["function"], GORILLA_TO_OPENAPI, ModelStyle.OPENAI_COMPLETIONS) for e in entries
        }
    for case in request["cases"]:
        category, model = case["category"], case["model"]
        prompt = prompts[category][case["id"]]
        # what BFCL stores as the model's result: the text after </think> (QwenFCHandler)
        text = handler._parse_query_response_prompting(_Response(case["text"]))["model_responses"]
        if eval_runner.is_relevance_or_irrelevance(category):
            result = eval_runner._evaluate_single_relevance_entry(handler, case["id"], text, prompt, model, category)
        else:
            result = eval_runner._evaluate_single_ast_entry(
                handler,
                case["id"],
                text,
                truths[category][case["id"]],
                prompt,
                model,
                category,
                language=Language.PYTHON,
                return_format=ReturnFormat.PYTHON,
            )
        answer["verdicts"].append({"valid": result["valid"], "error_type": result.get("error_type")})
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
