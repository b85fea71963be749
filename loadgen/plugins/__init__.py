"""Code that runs inside someone else's engine process: plugins that write the engine step trace.

Why a room of its own: these modules are loaded by a foreign engine (vLLM through its ``vllm.general_plugins``
entry point) in every one of its processes, so they must be light and harmless there. They import the standard
library, orjson and ``loadgen.core`` only (``tests/test_layout.py``); the engine itself only inside the function
the engine calls. docs/design.md: "The engine step trace".
"""
