"""Derive the validation trace: the Azure LLM 2023 conversation trace's first rows, lengths scaled to the tiny model.

The tiny target was trained on contexts <= 1024 tokens; the real trace's prompts average ~1,155
tokens. Each row keeps its real timestamp (the bursty arrival pattern) and gets its prompt and
output lengths divided by SCALE (rounded up), clamped to [8, 800] and [2, 200] so prompt + output
stays in the trained range. Source: data/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv,
CC-BY 4.0, Patel et al., "Splitwise", ISCA 2024 (an adaptation: lengths scaled, rows cut).

    .venv/bin/python scripts/make_validation_trace.py    # rewrites data/scenarios/validation/azure-conv-quarter.csv
"""

from __future__ import annotations

import csv
from pathlib import Path

from tripath.core.atomic import AtomicFile

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "data/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv"
OUT = ROOT / "data/scenarios/validation/azure-conv-quarter.csv"
SCALE = 4
ROWS = 400  # the first 400 requests (about 84 s of the real trace)
PROMPT_RANGE = (8, 800)
OUTPUT_RANGE = (2, 200)


def scaled(value: str, bounds: tuple[int, int]) -> int:
    return min(bounds[1], max(bounds[0], -(-int(value) // SCALE)))


def main() -> None:
    with SOURCE.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        rows = [[ts, scaled(ctx, PROMPT_RANGE), scaled(gen, OUTPUT_RANGE)] for ts, ctx, gen in
                (next(reader) for _ in range(ROWS))]
    with AtomicFile(OUT) as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {OUT} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
