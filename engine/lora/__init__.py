"""Multi-LoRA serving: many PEFT adapters on one shared base model, in one batch.

Adapters are read and validated on the host (`peft_adapter`), kept in two tiers by a registry
(`registry`: device slots and host memory, LRU between them), written into stacked device slots
that every LoRA-aware linear layer reads by index (`layers`), and selected per token each step
(`batch`). `fair_queue` keeps one adapter's flood from starving another's requests;
`manager.LoraManager` joins all of it to the engine.
"""
