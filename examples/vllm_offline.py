"""Valid tool calls from vLLM, offline, by both routes of :mod:`toolgrammar.vllm`.

Run it in an environment with vLLM (``bash scripts/test-vllm.sh`` builds ``.venv-vllm``)::

    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python examples/vllm_offline.py
    VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python examples/vllm_offline.py --model /path/to/Qwen3-0.6B

Without ``--model`` it saves a tiny *random* Qwen3 with the real Qwen3 tokenizer to a temporary
directory (nothing is downloaded), so the text is noise; the calls are still valid, because the
grammar decides their shape. About a minute on a 2-core CPU, most of it vLLM's start-up.

Route 2 (the logits processor) is named in ``LLM(logits_processors=[...])`` and switched on per
request with ``extra_args``; the request's ``max_tokens`` is its budget, and the call closes within
it. Route 1 (structured outputs) needs no processor, but cannot see the budget: with a small
``max_tokens`` its call may be cut. The output shows both, judged by toolgrammar's strict parser.

With ``vllm serve`` the same two routes are::

    vllm serve MODEL --logits-processors toolgrammar.vllm:VllmToolCallLogitsProcessor
    # route 2, per request (vllm_xargs takes flat values, hence the JSON string):
    client.chat.completions.create(..., max_tokens=256,
        extra_body={"vllm_xargs": toolgrammar.vllm.extra_args(tools, tool_choice="required", as_json=True)})
    # route 1, per request:
    extra_body={"structured_outputs": {"structural_tag": json.dumps(toolgrammar.vllm.structural_tag(tools))}}
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

TOOLS = Path(__file__).resolve().parent / "tools" / "seed_tools.json"


def save_tiny_model(build, folder: Path) -> str:
    """The tiny random Qwen3 and the real Qwen3 tokenizer, saved as a folder vLLM loads (bfloat16, 8k context)."""
    import torch

    model, tokenizer = build()
    model = model.to(torch.bfloat16)
    model.config.max_position_embeddings = 8192
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local model directory (default: a tiny random Qwen3 in a temp dir)")
    parser.add_argument("--max-tokens", type=int, default=48, help="the budget of every request")
    args = parser.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU backend

    from hf_generate import tiny_random_qwen3  # the sibling example (this script's folder is on sys.path)
    from vllm import LLM, SamplingParams

    from toolgrammar import parse_turn
    from toolgrammar.vllm import VllmToolCallLogitsProcessor, extra_args, structured_outputs

    tools = json.loads(TOOLS.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="toolgrammar-example-") as tmp:
        model = args.model or save_tiny_model(tiny_random_qwen3, Path(tmp) / "tiny-qwen3")
        llm = LLM(
            model=model,
            logits_processors=[VllmToolCallLogitsProcessor],  # route 2; route 1 needs nothing here
            gpu_memory_utilization=0.2,  # on the CPU backend: the share of RAM
            max_model_len=4096,
            enforce_eager=True,
            seed=0,
        )
        messages = [{"role": "user", "content": "Write hello.txt with a greeting, then run the tests."}]
        prompt = llm.get_tokenizer().apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        policy = {"tool_choice": "write_file", "reasoning": "disabled"}
        routes = {
            "logits processor": SamplingParams(
                max_tokens=args.max_tokens, temperature=1.0, seed=7, extra_args=extra_args(tools, **policy)
            ),
            "structured outputs": SamplingParams(
                max_tokens=args.max_tokens,
                temperature=1.0,
                seed=7,
                structured_outputs=structured_outputs(tools, **policy),
            ),
        }
        outputs = llm.generate([prompt] * len(routes), list(routes.values()), use_tqdm=False)
        for name, output in zip(routes, outputs, strict=True):
            text = output.outputs[0].text
            turn = parse_turn(text, tools)
            print(f"--- {name} ({len(output.outputs[0].token_ids)} of {args.max_tokens} tokens)")
            print(text)
            for call in turn.tool_calls:
                print(f"  call: {call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
            for error in turn.errors:
                print(f"  error: {error.kind}: {error.message}")


if __name__ == "__main__":
    main()
