"""The real LLaMA-architecture engine in PyTorch: continuous batching over paged KV.

``model`` (the network and its checkpoints), ``kv`` (paged, dense and compressed KV),
``tiered`` (device / host / SSD pages), ``speculative`` (draft-verify rounds), ``seqpar``
(one sequence over P ranks with torch.distributed), and the serving loop that replays a workload.
"""
