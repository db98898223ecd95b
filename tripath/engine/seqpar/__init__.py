"""Sequence parallelism over torch.distributed: sharding, partial attention and the LSE merge."""
