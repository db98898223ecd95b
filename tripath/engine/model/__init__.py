"""The LLaMA network, its config, HF-layout checkpoints, the byte tokenizer and inference fusion."""
