"""The llmop inference engine: paged KV cache, continuous batching, multi-LoRA, OpenAI API.

This package's `__init__` imports nothing heavy: `llmop.engine.config` is shared with the
torch-free operator, so importing the package must not pull torch in.
"""
