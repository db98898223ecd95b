"""What each row of the seed's decision matrix claims, and where the seed contradicts itself.

SEEDS.md Section 4 gives, per row, a recommendation and a reason. The reason says which question
the row answers: a gain (a path makes requests that fit faster: rows 1, 2, 4) or memory (a path
makes requests fit: rows 3, 5, "90% GPU memory saved", "the only feasible option"). The notes
below are shown in the matrix's "why" column only when the answer has the named path in the named
role, so they explain the answer actually given rather than a hypothetical one.
"""

from __future__ import annotations

# What each seed row claims: "gain" (a path makes requests that fit faster) or "memory" (a path
# makes requests fit). Rows 3 and 5 give memory as their reason (Section 4's "why" column).
SEED_CLAIM: dict[str, str] = {"dialogue-medium": "gain", "math-medium": "gain", "summarization-very-long": "memory",
                              "fixed-length-multi-gpu": "gain", "very-long-single-gpu": "memory"}

# Where the seed contradicts itself or leaves something out, keyed by (row, role, path) of the
# answer: the note is shown only when the answer has that path in that role.
SEED_NOTES: dict[tuple[str, str, str], str] = {
    ("dialogue-medium", "memory", "tiered"):
        "the seed says tiering is not needed here (Section 4: 8K fits on an A100 80GB), but its own Table 3.2 "
        "pages at 16K (~20 page-outs, 35 ms); the seed profile's 8K-token budget is derived from that table, "
        "so the upper part of the 8-16K band needs tiering to be admitted at all",
    ("math-medium", "memory", "tiered"):
        "the seed's 'tiering not needed' contradicts its Table 3.2 (16K pages ~20 times): on the 8K-token "
        "budget derived from that table tiering is needed for memory",
    ("math-medium", "gain", "speculative"):
        "with tiering each iteration pays the paging setup once (21 ms, Table 3.2 fit); a speculative round "
        "spreads it over E(a) tokens, so speculation gains even at 55% acceptance, which the seed's row, "
        "assuming no paging, does not consider",  # shown only when the answer pages (NEEDS_TIERED)
    ("summarization-very-long", "gain", "speculative"):
        "the seed's row names only tiering, but its Table 3.1 gives summarization -20% per-token latency from "
        "speculation and its Combinations line says speculative + tiered combine well",
    ("very-long-single-gpu", "gain", "speculative"):
        "the seed's row names only tiering ('the only feasible option', true of feasibility), but speculation "
        "also pays for its task mix on top of it (Table 3.1)",
    ("fixed-length-multi-gpu", "memory", "tiered"):
        "the seed calls SP + tiered 'not recommended' (paging across GPUs), yet SP's doubled budget (2 x 8K "
        "tokens) cannot hold the 8-32K band: without paging most requests are rejected",
}

# notes about paging that hold only when the answer itself has the tiered path (on a GPU profile whose KV budget
# holds the row's lengths, speculation gains for its own reasons)
NEEDS_TIERED = frozenset({("math-medium", "gain", "speculative")})
