"""tripath's engine vs transformers' generate on the same weights, same run (measured on this machine).

decode tokens/s at batch 1, 8, 32: (tokens generated between the 1st and the Nth new token) /
(time to N new tokens - time to 1 new token), so prefill cancels out for both engines.
prefill tokens/s at 1K, 4K, 8K context: prompt tokens / time to the first new token.
serving: a heterogeneous workload (lengths from the Azure LLM 2023 conversation trace), served by
tripath's continuous batching vs transformers' static batches; see serving_comparison.py.
Weights are random (a small LLaMA shape with 8K positions, or --checkpoint); speed does not
depend on their values.  Prints a table, or JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tripath.engine.engine import Engine
from tripath.engine.engine_config import EngineConfig
from tripath.engine.model.config import PRESETS
from tripath.engine.model.model import LlamaModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_comparison import ServingWorkload, print_serving, serving_run  # noqa: E402 - beside this script


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of `repeats` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _prompts(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


class Runner:
    """Both engines over one set of weights."""

    def __init__(self, model: LlamaModel, hf: LlamaForCausalLM, device: torch.device, max_tokens: int) -> None:
        self.model, self.hf, self.device = model, hf, device
        # enough blocks for batch 32 x (prompt + output) and for the longest prefill
        self.engine_config = EngineConfig(
            max_batch_size=64, max_batched_tokens=max_tokens, block_size=16, num_blocks=max_tokens // 16 + 8
        )
        self.engine = Engine(model, self.engine_config)

    def ours(self, prompts: torch.Tensor, new_tokens: int) -> None:
        self.engine.generate(prompts.tolist(), new_tokens)

    @torch.inference_mode()
    def theirs(self, prompts: torch.Tensor, new_tokens: int) -> None:
        ids = prompts.to(self.device)
        self.hf.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )

    def serve_ours(self, wl: ServingWorkload, batch: int) -> tuple[float, list[float], list[list[int]]]:
        """All requests queued at once; the engine admits up to `batch` and refills as they finish.
        Returns wall seconds, each request's completion time (s after start) and outputs."""
        blocks_per_seq = -(-wl.max_len // 16)
        config = EngineConfig(  # KV for `batch` of the longest requests: no preemption
            max_batch_size=batch, max_batched_tokens=2048, block_size=16, num_blocks=batch * blocks_per_seq + 8
        )
        engine = Engine(self.model, config)
        engine.generate(wl.prompts[:4], [min(8, k) for k in wl.output_tokens[:4]])  # warm-up
        done = [0.0] * len(wl.prompts)
        _sync(self.device)
        start = time.perf_counter()
        ids = [engine.add_request(p, k) for p, k in zip(wl.prompts, wl.output_tokens, strict=True)]
        index = {rid: i for i, rid in enumerate(ids)}
        while engine.has_unfinished:
            record = engine.step()  # synchronised inside
            for rid in record.finished:
                done[index[rid]] = time.perf_counter() - start
        return time.perf_counter() - start, done, [engine.output(rid) for rid in ids]

    @torch.inference_mode()
    def serve_theirs(self, wl: ServingWorkload, batch: int) -> tuple[float, list[float], list[list[int]], int, int]:
        """Static batching, as `generate` does it: batches of `batch` in arrival order, prompts
        left-padded to the batch's longest (masked), every row decoded to the batch's longest output.
        Returns wall seconds, completion times, each request's own outputs (its first output_tokens),
        and the prompt and output tokens computed including padding and overrun."""

        def one(prompts: list[list[int]], new: int) -> torch.Tensor:
            width = max(len(p) for p in prompts)
            ids = torch.zeros((len(prompts), width), dtype=torch.int64)  # [B, width], left-padded
            mask = torch.zeros_like(ids)
            for row, p in enumerate(prompts):
                ids[row, width - len(p) :] = torch.tensor(p)
                mask[row, width - len(p) :] = 1
            out = self.hf.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
            _sync(self.device)
            return out[:, width:].cpu()  # [B, new]

        one(wl.prompts[:4], min(8, max(wl.output_tokens[:4])))  # warm-up, ragged like the real batches
        done, outputs, prompt_computed, output_computed = [], [], 0, 0
        start = time.perf_counter()
        for b in range(0, len(wl.prompts), batch):
            prompts, wants = wl.prompts[b : b + batch], wl.output_tokens[b : b + batch]
            new = max(wants)
            generated = one(prompts, new)
            finished = time.perf_counter() - start  # every request of a batch returns together
            done += [finished] * len(prompts)
            outputs += [row[:k] for row, k in zip(generated.tolist(), wants, strict=True)]
            prompt_computed += len(prompts) * max(len(p) for p in prompts)
            output_computed += len(prompts) * new
        return time.perf_counter() - start, done, outputs, prompt_computed, output_computed


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    if args.checkpoint:
        from tripath.engine.model.checkpoint import load_checkpoint

        config, model = load_checkpoint(args.checkpoint, dtype=dtype, device=device)
    else:
        config = PRESETS[args.preset]
        model = LlamaModel(config, torch.Generator().manual_seed(0)).to(device=device, dtype=dtype).eval()
    hf = LlamaForCausalLM(LlamaConfig(**config.to_hf_dict())).to(device=device, dtype=dtype).eval()
    hf.load_state_dict(model.state_dict())
    max_ctx = max(args.contexts)
    if max_ctx + 1 > config.max_position_embeddings:
        raise SystemExit(f"context {max_ctx} exceeds the model's {config.max_position_embeddings} positions")
    runner = Runner(model, hf, device, max(max_ctx + 16, max(args.batches) * (args.prompt + args.new_tokens)))
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for batch in args.batches:
        prompts = _prompts(batch, args.prompt, config.vocab_size, seed=batch)
        row = {"kind": "decode", "batch": batch, "prompt": args.prompt, "new_tokens": args.new_tokens}
        for name, fn in (("tripath", runner.ours), ("transformers", runner.theirs)):
            t1 = _timed(lambda fn=fn, p=prompts: fn(p, 1), device, args.repeats)
            tn = _timed(lambda fn=fn, p=prompts: fn(p, args.new_tokens), device, args.repeats)
            row[f"{name}_tokens_per_s"] = batch * (args.new_tokens - 1) / max(tn - t1, 1e-9)
        row["ratio"] = row["tripath_tokens_per_s"] / row["transformers_tokens_per_s"]
        rows.append(row)
    for ctx in args.contexts:
        prompts = _prompts(1, ctx, config.vocab_size, seed=ctx)
        row = {"kind": "prefill", "batch": 1, "context": ctx}
        for name, fn in (("tripath", runner.ours), ("transformers", runner.theirs)):
            t = _timed(lambda fn=fn, p=prompts: fn(p, 1), device, args.repeats)
            row[f"{name}_tokens_per_s"] = ctx / t
        row["ratio"] = row["tripath_tokens_per_s"] / row["transformers_tokens_per_s"]
        rows.append(row)
    serving = None
    if args.serving_requests:
        serving = serving_run(runner, args, config.max_position_embeddings, config.vocab_size)
    return {
        "source": "measured",
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
        "model": {
            "preset": None if args.checkpoint else args.preset,
            "checkpoint": args.checkpoint,
            "params": config.num_params(),
        },
        "torch": torch.__version__,
        "rows": rows,
        "serving": serving,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="bench-small", choices=sorted(PRESETS))
    p.add_argument("--checkpoint", help="HF-layout checkpoint folder instead of random weights")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--contexts", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--prompt", type=int, default=128, help="prompt length of the decode runs")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--serving-requests", type=int, default=64, help="requests in the serving run (0: skip)")
    p.add_argument("--serving-batch", type=int, default=32, help="max batch of both servers")
    p.add_argument("--serving-max-len", type=int, default=1024, help="scale trace lengths to fit this")
    p.add_argument("--serving-seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"measured on {result['device']} ({result['dtype']}, {result['model']['params']:,} params, "
        f"torch {result['torch']}, {result['threads']} threads)"
    )
    print(f"{'kind':8} {'size':>6} {'tripath tok/s':>14} {'transformers tok/s':>19} {'ratio':>7}")
    for row in result["rows"]:
        size = row["batch"] if row["kind"] == "decode" else row["context"]
        print(
            f"{row['kind']:8} {size:>6} {row['tripath_tokens_per_s']:>14.1f} "
            f"{row['transformers_tokens_per_s']:>19.1f} {row['ratio']:>6.2f}x"
        )
    if result["serving"]:
        print_serving(result["serving"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
