"""One module per calibration sweep: prefill, decode, paging, speculative, sequence parallel,
compression, step overhead; each times the engine and fits one profile section.
"""
