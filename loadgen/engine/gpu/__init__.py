"""GPU backend of ``loadgen serve``: a transformers model in bf16 behind the embedded engine's HTTP layer.

Why this package exists: the embedded engine's protocol, runner thread, stop rules and metrics stay
as they are; only the model step changes. :mod:`.model` builds the network and runs a step over a
slot KV cache; :mod:`.scheduler` is a continuous-batching scheduler with the CPU ``Scheduler``'s
interface. Importing this package imports torch and transformers, so only ``--backend gpu`` may
import it: CPU installs and CI never do.
"""
