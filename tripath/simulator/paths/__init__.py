"""The optimization paths in the simulator: speculative decoding, tiered KV, sequence parallelism,
KV compression; their step model, capacity and provenance.
"""
