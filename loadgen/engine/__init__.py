"""The embedded engine: a small OpenAI-compatible CPU server with GPU-like batch-dependent numerics.

Layout (one job per module): ``kernels`` (bf16 storage, split reductions and their merges),
``plan`` (split counts from a step's shape), ``weights`` and ``tokenizer`` (the fixed model),
``model`` (forward pass of one step), ``kvcache`` (slots and prefix cache), ``sampling`` and
``detok`` (tokens and text), ``scheduler`` (continuous batching), ``runner`` (engine thread),
``protocol``/``responses``/``server``/``metrics`` (HTTP), ``cli`` (process entry), ``prompts``
(the documented prompt set); the prefill and decode roles: ``handoff`` (``kv_transfer_params``),
``kvwire`` (a handed-over KV and its bytes), ``transfers`` (the prefill side's store), ``pd``
(their HTTP). Importing the package starts nothing.
"""
