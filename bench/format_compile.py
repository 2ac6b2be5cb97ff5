"""Processor build per tool-call format: a new tool list to a ready ``ToolCallLogitsProcessor``, empty caches.

    .venv/bin/python bench/format_compile.py                          # hermes and qwen-xml, varied tools
    .venv/bin/python bench/format_compile.py --formats qwen-xml --sizes 1,20,50,200 --reps 5

``bench/cold_start.py`` measures the first call against the other engines in the ``hermes`` format (the
anchors' block grammars are hermes). This measures toolgrammar alone in any format it has: for each size, a
new list of the varied tools (``bench/toolsets_cold.py``, new names every repetition), every cache emptied
(in memory, and a new empty ``TOOLGRAMMAR_CACHE`` folder), then the processor is built; the median of
``--reps``. The tokenizer's vocabulary and token table are built once, before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import common
from common import REPO, markdown_table, write_results
from toolsets_cold import VARIED_SIZES, toolset


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--formats", default="hermes,qwen-xml", help="comma-separated (default hermes,qwen-xml)")
    p.add_argument("--sizes", default=",".join(map(str, VARIED_SIZES)), help="tool counts, comma-separated")
    p.add_argument("--reps", type=int, default=3, help="repetitions per cell (median; default 3)")
    p.add_argument("--no-write", action="store_true", help="print the table, write no files")
    args = p.parse_args(argv)
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
    if args.reps < 1 or not sizes or min(sizes) < 1:
        p.error("--reps and every size must be at least 1")

    from toolgrammar import caches
    from toolgrammar.formats import FORMATS
    from toolgrammar.integrations.hf import ToolCallLogitsProcessor, vocabulary_of
    from toolgrammar.integrations.tokenizers import load_qwen3_tokenizer
    from toolgrammar.runtime.token_table import token_table

    for f in formats:
        if f not in FORMATS:
            p.error(f"unknown format {f!r} (one of {', '.join(sorted(FORMATS))})")
    tok = load_qwen3_tokenizer()
    token_table(vocabulary_of(tok))
    info = common.machine_info()
    root = tempfile.mkdtemp(prefix="toolgrammar-format-compile-")
    cells: dict[str, dict[int, float]] = {f: {} for f in formats}
    started = time.perf_counter()
    for fmt in formats:
        ToolCallLogitsProcessor(tok, toolset("varied", 1, "warm").tools, format=fmt)  # the format's imports
        for n in sizes:
            times = []
            for rep in range(args.reps):
                os.environ["TOOLGRAMMAR_CACHE"] = os.path.join(root, f"{fmt}-{n}-{rep}")
                caches.clear(scope=None)
                tools = toolset("varied", n, f"r{rep}{n}").tools
                t0 = time.perf_counter()
                ToolCallLogitsProcessor(tok, tools, max_new_tokens=512, format=fmt)
                times.append((time.perf_counter() - t0) * 1e3)
            cells[fmt][n] = statistics.median(times)
            print(f"... {fmt} x{n}: {cells[fmt][n]:.1f} ms", file=sys.stderr, flush=True)
    cmd = "python bench/format_compile.py " + " ".join(argv if argv is not None else sys.argv[1:])
    table = markdown_table(
        ["tools", *(f"{f}: build (ms)" for f in formats)],
        [[str(n), *(f"{cells[f][n]:,.1f}" for f in formats)] for n in sizes],
    )
    md = (
        f"# Processor build per format, varied tools, empty caches (median of {args.reps})\n\n`{cmd.strip()}`\n\n"
        f"{info['date']}, {info['cpu']}, {info['nproc']} cores, load average {info['load_average'][0]}, "
        f"commit {info['git']}.\n\n{table}\n\nTotal run: {time.perf_counter() - started:.0f} s."
    )
    print(md)
    if not args.no_write:
        data = {"machine": info, "command": cmd.strip(), "reps": args.reps, "ms": cells}
        md_path, js_path = write_results("format-compile", md, data)
        print(f"\nwrote {md_path.relative_to(REPO)} and {js_path.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
