"""Speculative decoding: proposers, lossless verification, the K controller and vLLM-style counters."""
