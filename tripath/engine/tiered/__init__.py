"""A tiered KV cache: pages on the device, in host memory and in SSD files, moved and metered."""
