"""Sequence-parallel sections for the published GPU profiles: ring prefill and sharded-KV decode, priced from the
profile's own costs and Vidur's measured NCCL collectives (data/peer-data/vidur, network/<gpu>_dgx).

A replica of degree P is P ranks, each a tensor-parallel group of the profile's tp GPUs (tp x P GPUs). Every GPU
of a rank holds heads / tp query heads and kv_heads / tp KV heads, so the SP traffic runs between the P GPUs that
hold the same heads, tp such exchanges side by side, each over its own links (NVSwitch inside a DGX node, one
NIC per GPU across nodes).

Which NCCL table (Vidur's medians, ``size`` in bytes) serves a degree: inside one 8-GPU DGX node (tp x P <= 8) the
send/recv rows with devices_per_node 2 (NVLink) and the all-reduce rows with num_workers P, devices_per_node P;
beyond one node the ring's slowest hop crosses nodes (send/recv devices_per_node 1) and the decode all-reduce
spans 8 / tp GPUs per node (num_workers P, devices_per_node 8 / tp). A degree whose rows are missing from the
tables is left out (``SpBuild.omitted`` says why). Sizes below a table's smallest are held at its time (the
latency floor; noted), sizes above its largest are priced as whole largest-size messages plus the rest.

Prefill, zigzag ring attention as ring-flash-attention runs it (zhuzilin/ring-flash-attention,
zigzag_ring_flash_attn.py): the prompt of N tokens is cut into 2P chunks of c = N / 2P tokens and rank r holds
chunks r and 2P-1-r. Per layer there are P steps; before each step but the last a rank sends the K/V block it
holds to the next rank and receives the previous rank's (N / P tokens of K and V), computes attention against
the block it holds, merges that block's partial into its fp32 accumulator by log-sum-exp, and waits for the
transfer after the merge. Step 0 is the rank's own block, 2c^2 + c causal query-key pairs; every later step is
2c^2 pairs on every rank (full queries on half the block, or half the queries on the full block), so the ring
is balanced. Per layer, with a the attention of a step, m a step's merge and x a step's send/recv:

    layer = max(a_0, x) + sum over steps 1..P-2 of max(a + m, x) + (a + m)       (P >= 2)

Attention is the profile's prefill c_attn per query-key pair (a per-layer share c_attn / layers); the linear
layers are c_tok per token on N / P tokens; c0 is paid once, every rank in parallel. So prefill at P is
c0 + c_tok N / P + layers x layer, and its attention and linear work sum to exactly 1 / P of one replica's: the
loss is the exposed transfer and the merges, which a row's merge_ms carries. A row's speedup is what the
simulator divides the work by (tripath/simulator/paths/seqpar.py: c0 + work / speedup + merge_ms), so that
it gives back this prefill time for a prompt alone in its iteration.

Decode, KV sharded: each rank attends its S / P cached tokens (the simulator splits decode attention by P).
Per layer the partials (B queries x heads / tp, each out of head_dim values and its lse) are combined by two
all-reduces over the P GPUs that hold the same heads: the max of the lse (B x heads / tp fp32), then the sum of
the rescaled outputs with their weights (B x heads / tp x (head_dim + 1) fp32); the new token (B int32) is then
broadcast, priced as an all-reduce of its bytes over the same GPUs (a broadcast moves no more). The merge
arithmetic (rescale, then normalise) is priced by its bytes over HBM bandwidth. Both are rows per batch
(``SpDecodeRow``): the collective sizes grow with B and do not depend on the context.

Elementwise merges are priced at the HBM peak with the op fused (a lower bound: no launch latency, no
temporaries); published bandwidths are tripath/calibrate/hardware.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from tripath.calibrate.hardware import SPECS
from tripath.calibrate.published.vidur import GPUS, collective_medians
from tripath.calibrate.published.vidur import network_path as vidur_network_path
from tripath.core.errors import InputError
from tripath.profile.profile import Profile, SequenceParallel, SpRow
from tripath.profile.sections import SpDecodeRow

# the DGX node whose NCCL tables price each GPU: Vidur measured DGX A100 and DGX H100; a DGX H200 has the same
# NVLink 4 / NVSwitch fabric as a DGX H100 (900 GB/s per GPU), so its collectives are priced on H100's (derived)
NETWORK_OF = {**GPUS, "h200": "h100"}
NODE_GPUS = 8  # GPUs per DGX A100 / DGX H100 node: the topology of Vidur's *_dgx network tables
DEGREES = (2, 4, 8)
LENGTHS = (4096, 8192, 16384, 32768, 65536, 131072)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ACC_BYTES = 4  # fp32: the merge's accumulator and lse, and the decode partials exchanged
TOKEN_BYTES = 4  # one int32 token id per sequence
NVLINK_PER_NODE, CROSS_NODE_PER_NODE = 2, 1  # send/recv devices_per_node: both GPUs in one node, or one per node


def _sig(value: float) -> float:
    return float(f"{value:.6g}")


@dataclass
class NcclTable:
    """Vidur's median times of one collective on one GPU group, by message size in bytes (and the sizes asked of it
    so far, for the section's note)."""

    path: Path
    collective: str
    workers: int
    per_node: int
    sizes: np.ndarray
    ms: np.ndarray
    queried: list[float] = field(default_factory=list, compare=False, repr=False)

    def ms_at(self, nbytes: float) -> float:
        """Interpolated median ms of one message of ``nbytes``: held at the smallest size below it; above the largest,
        whole largest-size messages one after another plus the rest."""
        self.queried.append(nbytes)
        largest = float(self.sizes[-1])
        whole, rest = divmod(nbytes, largest) if nbytes > largest else (0.0, nbytes)
        tail = float(np.interp(max(rest, float(self.sizes[0])), self.sizes, self.ms)) if rest > 0 else 0.0
        return whole * float(self.ms[-1]) + tail

    def label(self) -> str:
        rel = "/".join(self.path.parts[-3:])
        return (f"{rel} rows collective={self.collective}, num_workers={self.workers}, devices_per_node="
                f"{self.per_node} ({len(self.sizes)} sizes {self.sizes[0]:.0f}-{self.sizes[-1]:.0f} bytes, "
                f"time_stats.{self.collective}.median)")

    def range_note(self) -> str:
        """Which queried sizes lay outside the measured ones, for the section's note."""
        if not self.queried:
            return ""
        lo, hi = min(self.queried), max(self.queried)
        parts = [f"queried {lo:.0f}-{hi:.0f} bytes"]
        if lo < self.sizes[0]:
            parts.append(f"sizes under {self.sizes[0]:.0f} held at its time (latency floor, not extrapolated)")
        if hi > self.sizes[-1]:
            parts.append(f"sizes over {self.sizes[-1]:.0f} priced as whole {self.sizes[-1]:.0f}-byte messages plus "
                         "the rest (derived)")
        return "; ".join(parts)




def network_path(root: Path, gpu: str, collective: str) -> Path:
    """Vidur's NCCL table of ``collective`` (send_recv or all_reduce) on this GPU's DGX node (``NETWORK_OF``)."""
    if gpu not in NETWORK_OF:
        raise InputError(None, "key.hardware", f"no Vidur NCCL tables for {gpu!r} (known: {', '.join(NETWORK_OF)})")
    return vidur_network_path(root, f"{NETWORK_OF[gpu]}_dgx", f"{collective}.csv")


def nccl_table(root: Path, gpu: str, collective: str, workers: int, per_node: int) -> NcclTable | None:
    """The medians of one (collective, num_workers, devices_per_node), sizes deduplicated by mean; None without rows."""
    path = network_path(root, gpu, collective)
    if not path.is_file():
        raise InputError(str(path), None, f"missing: Vidur's {collective} table is needed for sequence parallelism")
    df = pd.read_csv(path)
    column = f"time_stats.{collective}.median"
    for name in ("num_workers", "devices_per_node", "collective", "size", column):
        if name not in df.columns:
            raise InputError(str(path), name, "missing column")
    sizes, ms = collective_medians(df, collective, workers, per_node)
    if not len(sizes):
        return None
    return NcclTable(path, collective, workers, per_node, sizes, ms)


@dataclass(frozen=True)
class Shapes:
    """Per-GPU shapes of one profile's model at its tp, and the bandwidth its merges run at."""

    layers: int
    heads: float  # query heads per GPU
    head_dim: int
    kv_bytes_per_token_layer: float  # K and V of one token in one layer, this GPU's KV heads
    dtype_bytes: int
    hbm_bytes_per_ms: float
    c0: float
    c_tok: float
    c_attn: float

    @classmethod
    def of(cls, profile: Profile, coefficients: dict[str, float] | None = None) -> Shapes:
        """``coefficients``: c0, c_tok, c_attn when the profile's prefill is not prefill_v1 (a measured table: the
        caller derives them from it, tripath/calibrate/aic/builder.py)."""
        model, tp = profile.model, profile.key.tp
        if model.heads % tp or model.kv_heads % tp:
            raise InputError(None, "key.tp", f"tp {tp} does not divide heads {model.heads} / kv_heads {model.kv_heads}")
        prefill = profile.costs.get("prefill")
        if coefficients is None and (prefill is None or prefill.formula != "prefill_v1"):
            raise InputError(None, "costs.prefill", "ring prefill needs the prefill_v1 coefficients c0, c_tok, c_attn")
        if profile.key.hardware not in SPECS or profile.key.hardware not in NETWORK_OF:
            raise InputError(None, "key.hardware", f"no Vidur network data for {profile.key.hardware!r}; known: "
                             f"{', '.join(NETWORK_OF)}")
        values = coefficients if coefficients is not None else prefill.values()
        return cls(model.layers, model.heads / tp, model.head_dim, model.kv_bytes_per_token / model.layers / tp,
                   model.dtype_bytes, SPECS[profile.key.hardware].memory_tbps * 1e9, values["c0"], values["c_tok"],
                   values["c_attn"])

    def merge_step_ms(self, queries: float) -> float:
        """One ring step's lse merge of ``queries`` rows into the fp32 accumulator: read the accumulator and the block's
        output (model dtype), write the accumulator, per element; read both lse and write one, per row and head."""
        per_head = self.head_dim * (2 * ACC_BYTES + self.dtype_bytes) + 3 * ACC_BYTES
        return queries * self.heads * per_head / self.hbm_bytes_per_ms

    def decode_merge_ms(self, batch: int) -> float:
        """One decode step's merge arithmetic, all layers, per (sequence, head): rescale the rank's partial (read its
        output and its lse and the max, write the fp32 output and weight), then normalise the summed ones (read
        them, write the output)."""
        d = self.head_dim
        rescale = d * self.dtype_bytes + 2 * ACC_BYTES + (d + 1) * ACC_BYTES
        normalise = (d + 1) * ACC_BYTES + d * self.dtype_bytes
        per_head = rescale + normalise
        return self.layers * batch * self.heads * per_head / self.hbm_bytes_per_ms


@dataclass(frozen=True)
class RingPrefill:
    """One prompt of ``tokens`` on a ring of ``degree`` ranks against one replica (times in ms, all layers unless
    said per layer)."""

    tokens: int
    degree: int
    one_ms: float  # the profile's prefill on one replica (tp GPUs)
    sp_ms: float  # the ring's prefill on tp x degree GPUs
    fixed_ms: float  # c0, paid once
    attention_ms: float  # per layer, one step after the first (2c^2 pairs)
    first_attention_ms: float  # per layer, step 0 (2c^2 + c pairs)
    transfer_ms: float  # per layer, one step's K/V send/recv
    merge_step_ms: float  # per layer, one step's lse merge
    exposed_ms: float  # transfer time no attention covered
    merge_ms: float  # the lse merges

    @property
    def overhead_ms(self) -> float:
        """What the ring adds to a perfect 1 / P split: the row's merge_ms."""
        return self.exposed_ms + self.merge_ms

    @property
    def speedup(self) -> float:
        """The row's speedup: the work (prefill less c0) over the ring's work less its overhead."""
        return (self.one_ms - self.fixed_ms) / (self.sp_ms - self.fixed_ms - self.overhead_ms)

    @property
    def end_to_end(self) -> float:
        """One replica's prefill over the ring's (the seed's Table 3.3 column)."""
        return self.one_ms / self.sp_ms


def ring_prefill(profile: Profile, degree: int, tokens: int, send_recv: NcclTable,
                 shapes: Shapes | None = None) -> RingPrefill:
    """The zigzag ring prefill of one ``tokens`` prompt on ``degree`` ranks (module docstring)."""
    if degree < 2:
        raise ValueError(f"degree must be >= 2, got {degree}")
    s = shapes or Shapes.of(profile)
    per_pair = s.c_attn / s.layers
    chunk = tokens / (2 * degree)
    first = per_pair * (2 * chunk * chunk + chunk)
    attention = per_pair * 2 * chunk * chunk
    transfer = send_recv.ms_at(tokens / degree * s.kv_bytes_per_token_layer)
    merge = s.merge_step_ms(tokens / degree)
    steps = [max(first, transfer)] + [max(attention + merge, transfer)] * (degree - 2) + [attention + merge]
    exposed = max(0.0, transfer - first) + (degree - 2) * max(0.0, transfer - attention - merge)
    sp_ms = s.c0 + s.c_tok * tokens / degree + s.layers * sum(steps)
    # one replica's prefill on the same linear model the ring splits (prefill_v1 at the shapes' coefficients), so
    # the speedup measures the ring alone: with a measured table, its difference from the fit is not ring gain
    one_ms = s.c0 + s.c_tok * tokens + s.c_attn * tokens * (tokens + 1.0) / 2.0
    return RingPrefill(tokens, degree, one_ms, sp_ms, s.c0, attention, first, transfer, merge,
                       s.layers * exposed, s.layers * (degree - 1) * merge)


def decode_row(profile: Profile, batch: int, all_reduce: NcclTable, shapes: Shapes | None = None) -> SpDecodeRow:
    """One decode step of ``batch`` sequences with the KV sharded over the table's GPUs (module docstring)."""
    s = shapes or Shapes.of(profile)
    rows = batch * s.heads  # (sequence, head) pairs on one GPU
    per_layer = all_reduce.ms_at(rows * ACC_BYTES) + all_reduce.ms_at(rows * (s.head_dim + 1) * ACC_BYTES)
    comm = s.layers * per_layer + all_reduce.ms_at(batch * TOKEN_BYTES)
    return SpDecodeRow(batch, _sig(s.decode_merge_ms(batch)), _sig(comm))


@dataclass(frozen=True)
class SpBuild:
    """The sections per degree, the degrees left out (degree -> why), and the prefill rows behind each section."""

    sections: dict[int, SequenceParallel]
    omitted: dict[int, str]
    prefill: dict[int, tuple[RingPrefill, ...]]


def tables_for(root: Path, profile: Profile, degree: int) -> tuple[NcclTable | None, NcclTable | None]:
    """(the ring's send/recv, the decode all-reduce) at this degree on the profile's GPU (module docstring)."""
    tp, gpu = profile.key.tp, profile.key.hardware
    inside = tp * degree <= NODE_GPUS
    send_recv = nccl_table(root, gpu, "send_recv", 2, NVLINK_PER_NODE if inside else CROSS_NODE_PER_NODE)
    all_reduce = nccl_table(root, gpu, "all_reduce", degree, degree if inside else NODE_GPUS // tp)
    return send_recv, all_reduce


def _substituted(gpu: str) -> str:
    """Where another GPU's NCCL tables stand in (``NETWORK_OF``), the clause that says so."""
    if GPUS.get(gpu) == NETWORK_OF[gpu]:
        return ""
    return (f"; collectives priced on DGX {NETWORK_OF[gpu].upper()}'s NCCL tables (no Vidur rows for {gpu}; the same "
            "NVLink 4 / NVSwitch fabric, derived)")


def _note(profile: Profile, degree: int, send_recv: NcclTable, all_reduce: NcclTable, s: Shapes) -> str:
    gpus = profile.key.tp * degree
    where = ("inside one 8-GPU DGX node (NVLink)" if gpus <= NODE_GPUS
             else f"over {gpus // NODE_GPUS} DGX nodes (the ring's slowest hop and the decode all-reduce cross nodes)")
    prefill = profile.costs["prefill"]
    attention_source = prefill.coefficients["c_attn"].source if "c_attn" in prefill.coefficients else (
        "derived from the measured prefill table")
    return (
        f"DERIVED, not measured: SP degree {degree} = {degree} ranks of tp {profile.key.tp} ({gpus} GPUs) {where}"
        f"{_substituted(profile.key.hardware)}. "
        f"Prefill rows: zigzag ring attention (tripath/calibrate/published/seqpar.py): per layer and step, the "
        f"profile's c_attn ({attention_source}) per query-key pair / {s.layers} layers, overlapped with the K/V "
        f"send/recv of N/P tokens ({s.kv_bytes_per_token_layer:.0f} bytes per token, layer and GPU) priced from "
        f"PUBLISHED Vidur NCCL medians: {send_recv.label()}, {send_recv.range_note()}; linear layers c_tok on N/P "
        f"tokens, c0 once. merge_ms = exposed transfer + log-sum-exp merges (bytes over the "
        f"{s.hbm_bytes_per_ms / 1e9:g} TB/s HBM peak, fused: a lower bound); speedup = (prefill(N) - c0) / (ring "
        f"prefill - c0 - merge_ms), what the simulator divides the work by: the ring splits the work exactly, so all "
        f"loss is in merge_ms. The profile's "
        f"prefill model is extrapolated from its domain (new_tokens {prefill.domain['new_tokens'][1]:g}, context "
        f"{prefill.domain['context_tokens'][1]:g}) to these lengths. decode_rows: per layer two all-reduces over the "
        f"{degree} GPUs holding the same heads (lse max, then rescaled outputs and weights, fp32) and one of the "
        f"tokens (int32, for the broadcast) per step, PUBLISHED Vidur NCCL medians: {all_reduce.label()}, "
        f"{all_reduce.range_note()}; merge_ms: the rescale and normalise arithmetic over HBM bandwidth (derived).")


def build_sequence_parallel(root: Path, profile: Profile, degrees: tuple[int, ...] = DEGREES,
                            lengths: tuple[int, ...] = LENGTHS, batches: tuple[int, ...] = BATCHES,
                            coefficients: dict[str, float] | None = None) -> SpBuild:
    """SP sections of the profile at each degree whose NCCL rows exist in the Vidur data under ``root``
    (``coefficients``: as ``Shapes.of``)."""
    shapes = Shapes.of(profile, coefficients)
    sections, omitted, prefill = {}, {}, {}
    for degree in degrees:
        send_recv, all_reduce = tables_for(root, profile, degree)
        if send_recv is None or all_reduce is None:
            omitted[degree] = (f"no Vidur {'send_recv' if send_recv is None else 'all_reduce'} rows for "
                               f"{profile.key.tp * degree} GPUs on {profile.key.hardware} (tp {profile.key.tp} x P "
                               f"{degree}) in {NETWORK_OF[profile.key.hardware]}_dgx")
            continue
        ring = tuple(ring_prefill(profile, degree, n, send_recv, shapes) for n in lengths)
        rows = tuple(SpRow(r.tokens, _sig(r.speedup), _sig(r.overhead_ms)) for r in ring)
        decode = tuple(decode_row(profile, b, all_reduce, shapes) for b in batches)
        sections[degree] = SequenceParallel(degree, rows, None, "derived",
                                            _note(profile, degree, send_recv, all_reduce, shapes), decode_rows=decode)
        prefill[degree] = ring
    return SpBuild(sections, omitted, prefill)


def sequence_parallel_sections(root: Path, profile: Profile) -> dict[int, SequenceParallel]:
    """The profile's ``sequence_parallel`` sections at degrees 2, 4 and 8 where Vidur has the interconnect rows."""
    return build_sequence_parallel(root, profile).sections
