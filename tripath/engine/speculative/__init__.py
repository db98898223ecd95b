"""Speculative decoding: proposers, lossless verification and vLLM-style counters.

The cost model and the K controllers live in tripath/core/speculative.py (the simulator runs them too).
"""
