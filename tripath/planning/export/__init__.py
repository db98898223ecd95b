"""A recommendation's serving settings as vLLM and SGLang command lines (suggestions), and the recommendation
kept as files.

settings (the shared data and the rule), common (what both engines add the same way), vllm, sglang, files
(scenario.toml and the export folder).
"""
