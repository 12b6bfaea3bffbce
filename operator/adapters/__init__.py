"""Tenants' LoRA adapters (`LLMAdapter`) on shared base models: grants, binding, placement on pods."""
