"""Build the seed profile from the numbers of the seed document (digest: /work/shared/SEEDS.md).

    .venv/bin/python scripts/make_seed_profile.py [--out-dir data/profiles]

writes seed-llama2-70b-a100.json and seed-llama2-70b-a100.samples.csv (the table rows the fits
used) through tripath.profile.profile. The output is a pure function of the tables below: running it
again gives byte-identical files (fitted values are rounded to 6 significant digits so that
last-bit differences between scipy/BLAS builds cannot change the file).

Every number says where it comes from: "seed" (copied from a table), "fitted" (least squares
to a seed table, named in the fit), "derived" (computed from the architecture or a roofline,
explained in the note) or "published" (a vendor specification). data/profiles/README.md
explains the choices, including where the seed document is physically questionable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from seed_fits import (
    A100_PEAK_FLOPS,
    KV_BUDGET_TOKENS,
    KV_BYTES_PER_TOKEN,
    MODEL,
    SEED_DOCUMENT,
    TABLE_3_1,
    TABLE_3_3,
    UTILISATION,
    fit_acceptance_cost_ratio,
    fit_decode,
    fit_paging,
    fit_sp_merge,
    samples_rows,
    sig6,
)

from tripath.core.data_dirs import PROFILES_DIR
from tripath.profile.profile import (
    Coefficient,
    CostModel,
    Hardware,
    MemoryBudget,
    PagingLink,
    Profile,
    ProfileKey,
    Provenance,
    SequenceParallel,
    Speculative,
    SpRow,
    TaskAcceptance,
    save_profile,
    save_samples,
)

NAME = "seed-llama2-70b-a100"
GIB = 1 << 30
# Fixed so that regenerating gives the same bytes: the date the tables were transcribed.
CREATED_UTC = "2026-11-29T00:00:00Z"
SAMPLES_HEADER = ("table", "series", "label", "x", "x_unit", "y", "y_unit", "used_by")
BUDGET_NOTE = (
    "KV of 8K tokens: Table 3.2 says 8K fits on the A100 and 16K pages. Device memory minus weights is "
    "negative (138 GB of fp16 weights on 80 GiB), so the seed's single-GPU setting is not physical; the "
    "budget follows the table, not the arithmetic."
)
NOTES = (
    "Seed numbers transcribed from a document, not measured: for demos and checks, not capacity plans.",
    "Physically questionable: LLaMA-2-70B fp16 weights (138 GB) exceed one A100 80GB, and a 45 ms "
    "batch-1 decode step is faster than reading them from HBM once (about 68 ms at 2.04 TB/s).",
    "Table 3.2 (16K: 120 ms P99 with paging) contradicts Table 3.3 (16K: 160 ms on 1 GPU without); "
    "the decode fit uses Table 3.3, whose rows agree with Table 3.2 at 4K and 8K.",
)


def hardware() -> Hardware:
    links = {
        "device_host": Coefficient(31.5, "GB/s", "published", "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128b/130b, "
                                   "per direction (A100 SXM4 host link)"),
        "host_ssd": Coefficient(7.0, "GB/s", "published", "typical PCIe 4.0 NVMe sequential read; the seed "
                                "gives no SSD figure"),
        "interconnect": Coefficient(300.0, "GB/s", "published", "NVLink 3 on A100: 600 GB/s bidirectional, "
                                    "300 GB/s per direction"),
    }
    note = ("device: A100 80GB HBM2e, 81920 MiB as nvidia-smi reports it (published). host and ssd: one "
            "GPU's share of a DGX A100 (1 TiB RAM and 15.36 TB NVMe cache for 8 GPUs), derived; the seed "
            "gives neither.")
    return Hardware("NVIDIA A100-SXM4-80GB", 80 * GIB, 128 * GIB, 15_360_000_000_000 // 8, links, note)


def costs() -> dict[str, CostModel]:
    decode, decode_fit, d_seq_note = fit_decode()
    d0 = decode["d0"]
    flops_note = f"at A100 fp16 dense peak {A100_PEAK_FLOPS / 1e12:g} TFLOP/s x utilisation {UTILISATION:g}"
    c_tok = sig6(2 * MODEL.params / (A100_PEAK_FLOPS * UTILISATION) * 1e3)
    # Attention per query-key pair per layer: QK^T and AV are 2*hidden FLOPs each (all heads).
    c_attn = sig6(4 * MODEL.hidden * MODEL.layers / (A100_PEAK_FLOPS * UTILISATION) * 1e3)
    prefill = CostModel(
        "prefill_v1",
        {"c0": Coefficient(d0, "ms", "derived", "per-iteration fixed cost, equal to the fitted decode d0"),
         "c_tok": Coefficient(c_tok, "ms/token", "derived", f"2*params FLOPs per token {flops_note}"),
         "c_attn": Coefficient(c_attn, "ms/(query-key pair)", "derived",
                               f"4*hidden*layers FLOPs per query-key pair {flops_note}")},
        ("new_tokens", "context_tokens"),
        {"new_tokens": (1, 65536), "context_tokens": (0, 65536)},
        None,
        "The seed gives no prefill time: compute roofline at a stated utilisation, not measured. The "
        "domain is the length range the seed document discusses (up to 64K), not a measured range.",
    )
    decode_model = CostModel(
        "decode_v1",
        {"d0": Coefficient(d0, "ms", "derived", "fitted batch-1 intercept (d0 + d_seq) minus derived d_seq"),
         "d_seq": Coefficient(decode["d_seq"], "ms/sequence", "derived", d_seq_note),
         "d_ctx": Coefficient(decode["d_ctx"], "ms/token", "fitted",
                              "slope of Table 3.3 1-GPU latency vs length")},
        ("batch", "total_context"),
        {"batch": (1, 1), "total_context": (4096, 32768)},
        decode_fit,
        "Fitted at batch 1 only (the seed has no batched numbers): every batched decode is an extrapolation.",
    )
    return {"prefill": prefill, "decode": decode_model}


def paging() -> dict[str, PagingLink]:
    setup, bandwidth, fit = fit_paging()
    device_host = CostModel(
        "paging_v1",
        {"setup_ms": Coefficient(setup, "ms", "fitted", "intercept of Table 3.2 paging latency vs bytes"),
         "bandwidth_gbps": Coefficient(bandwidth, "GB/s", "fitted",
                                       "inverse slope of the same fit; above the 31.5 GB/s PCIe 4.0 x16 "
                                       "peak, so the seed's paging is faster than physics allows")},
        ("bytes",),
        {"bytes": (8192 * KV_BYTES_PER_TOKEN, 57344 * KV_BYTES_PER_TOKEN)},
        fit,
        "Bytes paged = KV of the tokens beyond the 8K-token budget. Table 3.2 mixes host and SSD at 32K "
        "and 64K; the seed does not separate them, so the whole fit is given to the device-host link.",
    )
    host_ssd = CostModel(
        "paging_v1",
        {"setup_ms": Coefficient(0.1, "ms", "published", "typical NVMe read latency, about 100 us"),
         "bandwidth_gbps": Coefficient(7.0, "GB/s", "published", "typical PCIe 4.0 NVMe sequential read")},
        ("bytes",),
        {"bytes": (0, 0)},
        None,
        "Not in the seed: vendor-typical figures, never measured (domain empty).",
    )
    two_k = 2048 * KV_BYTES_PER_TOKEN
    return {name: PagingLink(model, sig6(model.evaluate(bytes=two_k) - model.evaluate(bytes=0.0)))
            for name, model in (("device_host", device_host), ("host_ssd", host_ssd))}


def speculative() -> tuple[Speculative, dict[str, TaskAcceptance]]:
    c, fit, break_even = fit_acceptance_cost_ratio()
    spec = Speculative(
        "llama-2-7b", 5,
        Coefficient(c, "1", "fitted", f"least squares of (K*c + 1)/E(a) to Table 3.1 latency changes; "
                    f"break-even acceptance at K=5: {break_even:.3f}"),
        Coefficient(1.0, "1", "derived", "verify of K+1 tokens costs one target decode step (memory-bound "
                    "decode reads the weights once either way); the seed's own arithmetic assumes this"),
        fit,
        "Table 3.1 (K=5). The document calls the gain TTFT; speculation does not shorten prefill, so it "
        "is read as per-token decode latency.",
    )
    acceptance = {task: TaskAcceptance(a, 5, None, "seed", f"Table 3.1: latency change {change:+.0%}")
                  for task, a, change in TABLE_3_1}
    return spec, acceptance


def sequence_parallel() -> dict[int, SequenceParallel]:
    m0, m_ctx, fit = fit_sp_merge()
    merge = CostModel(
        "sp_merge_v1",
        {"m0": Coefficient(m0, "ms", "fitted", "intercept of Table 3.3 merge overhead vs length"),
         "m_ctx": Coefficient(m_ctx, "ms/token", "fitted", "slope of the same fit")},
        ("context_tokens",),
        {"context_tokens": (4096, 32768)},
        fit,
        "2 GPUs; the seed does not say over which link the partial results travel.",
    )
    rows = tuple(SpRow(tokens, speedup, merge_ms) for tokens, _one, _two, speedup, merge_ms in TABLE_3_3)
    return {2: SequenceParallel(2, rows, merge, "seed", "Table 3.3: speedup as printed (about 1.8x at every "
                                "length); 1-GPU and 2-GPU times are in the samples CSV")}


def build_seed_profile() -> Profile:
    spec, acceptance = speculative()
    return Profile(
        key=ProfileKey("a100-80gb", "llama-2-70b", "fp16", 1, "seed"),
        source="seed",
        hardware=hardware(),
        model=MODEL,
        memory=MemoryBudget(KV_BUDGET_TOKENS * KV_BYTES_PER_TOKEN, "derived", BUDGET_NOTE),
        costs=costs(),
        provenance=Provenance(f"python scripts/make_seed_profile.py (tables of {SEED_DOCUMENT})", "seed",
                              None, None, None, CREATED_UTC, (SEED_DOCUMENT,)),
        speculative=spec,
        acceptance=acceptance,
        paging=paging(),
        sequence_parallel=sequence_parallel(),
        compression={},
        notes=NOTES,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=PROFILES_DIR, help="folder for the JSON and CSV")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    save_profile(build_seed_profile(), args.out_dir / f"{NAME}.json")
    save_samples(args.out_dir / f"{NAME}.samples.csv", SAMPLES_HEADER, samples_rows())
    print(f"wrote {args.out_dir / NAME}.json and .samples.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
