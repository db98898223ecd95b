"""Sequence parallelism for the whole LlamaModel: one long sequence over P ranks.

Prefill: rank r embeds and runs every layer on its own positions only (sharding.ShardLayout,
zigzag by default, so causal work is balanced).  In each layer the ranks all-gather K/V,
each attends its queries over all keys as partials with their LSE, merges them in fp32
(tripath/engine/softmax_merge.py), and keeps its OWN K/V in a local cache.  MLPs and projections are purely local.
The rank holding the last prompt position computes the logits and broadcasts the token.

Decode: every rank runs the (tiny) one-token forward; the new token's K/V is stored only on
the rank holding the fewest tokens, so the cache stays sharded where it was produced.  Each
rank attends its shard, the (out, lse) pairs are all-gathered and merged in rank order, which
makes every rank's result, and so its next token, bit-identical.

The model stays plain math: all of this lives in the ``attention`` callable LlamaModel takes.
Batch 1 by design: SP serves one long prompt at a time across P devices.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from tripath.engine.engine import run_to_completion
from tripath.engine.engine_config import RequestRejected
from tripath.engine.model.fusion import fuse_projections
from tripath.engine.model.model import LlamaModel
from tripath.engine.sampling import SamplingParams
from tripath.engine.seqpar.attention import (
    PhaseTimes,
    attention_with_lse,
    fused_kernel_available,
    sharded_causal_attention,
)
from tripath.engine.seqpar.sharding import LAYOUTS, Segment, ShardLayout
from tripath.engine.sequence import Sequence
from tripath.engine.softmax_merge import merge_partials
from tripath.engine.step_record import StepRecord
from tripath.engine.tiered.cache import TieredKVCache


@dataclass(frozen=True)
class SeqParConfig:
    layout: str = "zigzag"
    fused_kernel: bool = True  # aten's CPU flash kernel with LSE; False: the public fallback

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"SeqParConfig.layout: must be one of {LAYOUTS}, got {self.layout!r}")


class ShardedKVCache:
    """This rank's K/V in memory: per layer a [2, Hkv, capacity, D] buffer grown by doubling."""

    def __init__(self, num_layers: int) -> None:
        self.buffers: list[Tensor | None] = [None] * num_layers
        self.lengths = [0] * num_layers

    def append(self, layer: int, k: Tensor, v: Tensor) -> None:
        """k/v [T, Hkv, D] stored after the layer's tokens."""
        kv = torch.stack((k, v)).transpose(1, 2)  # [2, Hkv, T, D]
        held, new = self.lengths[layer], kv.shape[2]
        buf = self.buffers[layer]
        if buf is None or buf.shape[2] < held + new:
            grown = kv.new_empty(2, kv.shape[1], max(2 * (held + new), 64), kv.shape[3])  # [2, Hkv, cap, D]
            if buf is not None:
                grown[:, :, :held] = buf[:, :, :held]
            self.buffers[layer] = buf = grown
        buf[:, :, held : held + new] = kv
        self.lengths[layer] = held + new

    def keys_values(self, layer: int) -> tuple[Tensor, Tensor]:
        """The layer's K and V, each [1, Hkv, L, D] (views, no copy)."""
        buf = self.buffers[layer]
        assert buf is not None
        both = buf[:, :, : self.lengths[layer]].unsqueeze(1)  # [2, 1, Hkv, L, D]
        return both[0], both[1]


class TieredShardCache:
    """This rank's K/V in a tiered cache (device pool, host, SSD: tripath/engine/tiered/cache.py)."""

    def __init__(self, cache: TieredKVCache, seq: int = 0) -> None:
        self.cache, self.seq = cache, seq

    def append(self, layer: int, k: Tensor, v: Tensor) -> None:
        self.cache.append(self.seq, layer, k, v)

    def keys_values(self, layer: int) -> tuple[Tensor, Tensor]:
        k, v = self.cache.gather(self.seq, layer)  # [L, Hkv, D] each, paged in
        return k.transpose(0, 1).unsqueeze(0), v.transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]


KVShard = ShardedKVCache | TieredShardCache


class SequenceParallel:
    """One rank's share of a sequence-parallel LlamaModel. Every rank of `group` makes the same calls."""

    def __init__(
        self,
        model: LlamaModel,
        config: SeqParConfig,
        group: dist.ProcessGroup | None = None,
        cache: KVShard | None = None,
    ) -> None:
        self.model = fuse_projections(model.eval())
        self.config, self.group = config, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.device = next(model.parameters()).device
        self.fused = config.fused_kernel and fused_kernel_available(self.device)
        self.times = PhaseTimes()
        self.cache = cache if cache is not None else ShardedKVCache(model.config.num_layers)
        self.shard_lengths = [0] * self.world  # tokens held by each rank
        self.position = 0  # tokens in the sequence so far

    def _src(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def _broadcast_token(self, logits: Tensor | None, owner: int) -> int:
        token = torch.zeros(1, dtype=torch.int64, device=self.device)
        if logits is not None:
            token[0] = logits.argmax()
        with self.times.communicating():
            dist.broadcast(token, src=self._src(owner), group=self.group)
        return int(token.item())

    @torch.inference_mode()
    def prefill(self, prompt_ids: list[int]) -> int:
        """Shard the prompt, run it through the model, return the greedy next token (same on all ranks)."""
        if self.position:
            raise RuntimeError("prefill: this SequenceParallel already holds a sequence; make a new one")
        layout = ShardLayout(self.config.layout, self.world, len(prompt_ids))
        segments = [layout.segments(r) for r in range(self.world)]
        self.shard_lengths = [layout.shard_length(r) for r in range(self.world)]
        positions = layout.positions(self.rank).to(self.device)
        ids = torch.tensor(prompt_ids, dtype=torch.int64, device=self.device)[positions].unsqueeze(0)  # [1, T_r]
        owner = layout.owner(len(prompt_ids) - 1)
        # the last prompt position is the last token of the owner's last run
        last = torch.tensor([positions.numel() - 1] if self.rank == owner else [], dtype=torch.int64)
        attention = _PrefillAttention(self, segments)
        logits = self.model(ids, positions.unsqueeze(0), attention, logits_index=last.to(self.device))
        self.position = len(prompt_ids)
        return self._broadcast_token(logits[0, -1] if self.rank == owner else None, owner)

    @torch.inference_mode()
    def decode(self, token: int) -> int:
        """Feed `token` at the next position; return the greedy token after it."""
        if not self.position:
            raise RuntimeError("decode: call prefill first")
        holder = min(range(self.world), key=lambda r: (self.shard_lengths[r], r))
        ids = torch.tensor([[token]], dtype=torch.int64, device=self.device)  # [1, 1]
        positions = torch.tensor([[self.position]], dtype=torch.int64, device=self.device)
        attention = _DecodeAttention(self, stores=self.rank == holder)
        logits = self.model(ids, positions, attention)[0, -1]  # [V]
        self.shard_lengths[holder] += 1
        self.position += 1
        return self._broadcast_token(logits, 0)




class SeqParEngine:
    """Engine's serving API (check_request / add_request / step / output / release / generate) over
    SequenceParallel: one sequence at a time, FCFS, greedy, exactly max_new_tokens each (EOS ignored), so
    tripath.engine.workload_replay.serve replays a workload through it as through Engine.

    A step is one prefill (the head of the queue, on a fresh SequenceParallel; ``on_sequence`` sees it first)
    or one decode. Every rank of ``group`` must make the same calls; requests queued in the same order give
    the same steps on every rank, whenever each rank sees them arrive. ``cache(request_id)`` gives a sequence's
    KV shard (None: in memory). ``served`` keeps each finished request's PhaseTimes; ``wall_s``/``cpu_s``
    sum the steps' wall and thread CPU seconds.
    """

    def __init__(self, model: LlamaModel, config: SeqParConfig, group: dist.ProcessGroup | None = None,
                 cache: Callable[[int], KVShard] | None = None,
                 on_sequence: Callable[[SequenceParallel], None] | None = None) -> None:
        self.model, self.config, self.group = model, config, group
        self.cache, self.on_sequence = cache, on_sequence
        self.sequences: dict[int, Sequence] = {}
        self.waiting: deque[Sequence] = deque()
        self.current: tuple[Sequence, SequenceParallel] | None = None
        self.errors: dict[int, str] = {}  # serve() reads it for failed requests (none here)
        self.served: list[tuple[int, PhaseTimes]] = []
        self.wall_s = self.cpu_s = 0.0
        self._next_id = self._steps = 0

    def check_request(self, prompt_len: int, max_new_tokens: int) -> str | None:
        limit = self.model.config.max_position_embeddings
        if prompt_len + max_new_tokens > limit:
            return f"prompt + output = {prompt_len + max_new_tokens} tokens exceeds max_position_embeddings {limit}"
        return None

    def add_request(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingParams | None = None,
                    request_id: int | None = None) -> int:
        """Queue a request (greedy only); raises RequestRejected when it can never run."""
        if sampling is not None and not sampling.greedy:
            raise ValueError("SeqParEngine decodes greedily only")
        request_id = self._next_id if request_id is None else request_id
        if request_id in self.sequences:
            raise ValueError(f"request_id {request_id} is already in use")
        self._next_id = max(self._next_id, request_id + 1)
        reason = self.check_request(len(prompt_ids), max_new_tokens)
        if reason is not None:
            raise RequestRejected(f"request {request_id}: {reason}")
        seq = Sequence(request_id, list(prompt_ids), max_new_tokens)
        self.sequences[request_id] = seq
        self.waiting.append(seq)
        return request_id

    @property
    def has_unfinished(self) -> bool:
        return bool(self.waiting) or self.current is not None

    def step(self) -> StepRecord:
        start, cpu = time.perf_counter(), time.thread_time()
        admitted: tuple[int, ...] = ()
        if self.current is None:
            if not self.waiting:
                raise RuntimeError("step() with nothing schedulable; check has_unfinished first")
            seq = self.waiting.popleft()
            sp = SequenceParallel(self.model, self.config, self.group,
                                  self.cache(seq.request_id) if self.cache is not None else None)
            if self.on_sequence is not None:
                self.on_sequence(sp)
            self.current, admitted = (seq, sp), (seq.request_id,)
            seq.admitted = True
            new, token = len(seq.prompt_ids), sp.prefill(seq.prompt_ids)
        else:
            seq, sp = self.current
            new, token = 1, sp.decode(seq.output_ids[-1])
        cached = seq.num_computed
        seq.output_ids.append(token)
        seq.num_computed = seq.num_tokens - 1  # the new token is fed by the next decode
        finished: tuple[int, ...] = ()
        if seq.finished:
            self.served.append((seq.request_id, sp.times))
            self.current, finished = None, (seq.request_id,)
        wall = time.perf_counter() - start
        self.wall_s, self.cpu_s = self.wall_s + wall, self.cpu_s + time.thread_time() - cpu
        self._steps += 1
        return StepRecord(step=self._steps - 1, start_s=start, wall_s=wall, batch_size=1, num_tokens=new,
                          prefill_seqs=int(bool(admitted)), prefill_tokens=new if admitted else 0,
                          decode_seqs=int(not admitted), total_context=cached + new, num_preempted=0,
                          blocks_used=0, admitted=admitted, first_tokens=admitted, finished=finished,
                          chunk_shapes=((cached, new),))

    def output(self, request_id: int) -> list[int]:
        return list(self.sequences[request_id].output_ids)

    def request_fields(self, request_id: int) -> dict[str, int]:
        return {}

    def release(self, request_id: int) -> None:
        self.sequences.pop(request_id, None)

    def generate(self, prompts: list[list[int]], max_new_tokens: int | list[int],
                 sampling: SamplingParams | None = None) -> list[list[int]]:
        """Greedy continuations in prompt order; the same lists on every rank."""
        return run_to_completion(self, prompts, max_new_tokens, sampling)


class _PrefillAttention:
    """AttentionFn for a sharded prefill: exchange K/V, attend local queries over all keys, merge."""

    def __init__(self, sp: SequenceParallel, segments: list[tuple[Segment, ...]]) -> None:
        self.sp, self.segments = sp, segments

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, T_r, Hq, D], k/v [1, T_r, Hkv, D] (this rank's positions) -> [1, T_r, Hq, D]."""
        sp = self.sp
        sp.cache.append(layer, k[0], v[0])
        kh, vh = k.transpose(1, 2), v.transpose(1, 2)  # [1, Hkv, T_r, D]
        qh = q.transpose(1, 2).contiguous()  # [1, Hq, T_r, D]
        out, _ = sharded_causal_attention(qh, kh, vh, self.segments, sp.group, sp.fused, sp.times)
        return out.to(q.dtype).transpose(1, 2)  # [1, T_r, Hq, D]


class _DecodeAttention:
    """AttentionFn for one decode token: attend the local shard, all-gather (out, lse), merge."""

    def __init__(self, sp: SequenceParallel, stores: bool) -> None:
        self.sp, self.stores = sp, stores

    def __call__(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q [1, 1, Hq, D], k/v [1, 1, Hkv, D] -> [1, 1, Hq, D]."""
        sp = self.sp
        _, _, hq, d = q.shape
        hkv = k.shape[2]
        if self.stores:
            sp.cache.append(layer, k[0], v[0])
        held = sp.shard_lengths[sp.rank] + int(self.stores)
        start = time.perf_counter()
        if held:
            keys, values = sp.cache.keys_values(layer)  # [1, Hkv, L, D] each
            # one query row sees all keys: its G query heads per KV head become G rows, no K/V copy
            qg = q.reshape(1, hkv, hq // hkv, d)  # [1, Hkv, G, D]
            out, lse = attention_with_lse(qg, keys, values, causal=False, fused=sp.fused)
            part = torch.cat([out.float().reshape(hq, d), lse.reshape(hq, 1)], dim=1)  # [Hq, D + 1]
        else:  # this rank holds nothing yet: an empty partial
            part = torch.cat([q.new_zeros(hq, d, dtype=torch.float32), q.new_full((hq, 1), float("-inf"))], 1)
        sp.times.attention_s += time.perf_counter() - start
        with sp.times.communicating():
            if sp.world > 1:
                parts = [torch.empty_like(part) for _ in range(sp.world)]
                dist.all_gather(parts, part, group=sp.group)
            else:
                parts = [part]
        after = time.perf_counter()
        out, _ = merge_partials([p[:, :d] for p in parts], [p[:, d] for p in parts])  # [Hq, D]
        sp.times.merge_s += time.perf_counter() - after
        return out.to(q.dtype).reshape(1, 1, hq, d)


def main() -> None:
    """torchrun entry (gloo on CPU, NCCL on GPUs):

        torchrun --nproc-per-node 2 --master-addr 127.0.0.1 -m tripath.engine.seqpar.parallel --prompt "def add(a, b):"
    """
    import argparse

    from tripath.core.data_dirs import MODELS_DIR
    from tripath.engine.model.checkpoint import load_checkpoint
    from tripath.engine.model.tokenizer import ByteTokenizer
    from tripath.engine.seqpar.dist import init_from_torchrun

    parser = argparse.ArgumentParser(description="Greedy generation with the sequence sharded over torchrun's ranks")
    parser.add_argument("--checkpoint", default=str(MODELS_DIR / "tiny-target"))
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--layout", default="zigzag", choices=LAYOUTS)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (CPU)")
    args = parser.parse_args()
    device = init_from_torchrun(threads_per_rank=args.threads)
    try:
        tok = ByteTokenizer()
        model = load_checkpoint(args.checkpoint, device=device)[1]
        engine = SeqParEngine(model, SeqParConfig(args.layout))
        start = time.perf_counter()
        out = engine.generate([tok.encode(args.prompt, add_bos=True)], args.max_new_tokens)[0]
        wall = time.perf_counter() - start
        times = engine.served[0][1]
        rank, world = dist.get_rank(), dist.get_world_size()
        print(
            f"rank {rank}/{world}: {len(out)} tokens in {wall:.3f} s (measured); attention "
            f"{times.attention_s:.3f} s, comm {times.comm_s:.3f} s, merge {times.merge_s:.3f} s (prefill + decode)",
            flush=True,
        )
        if rank == 0:
            print(tok.decode(tok.truncate_at_eos(out)), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
