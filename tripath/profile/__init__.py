"""The calibration profile: the one contract between calibration and the simulator.

The dataclasses and their JSON codec, the cost-formula registry, the path sections (paging,
sequence parallelism, compression, speculative decoding) and the show/compare views.
"""
