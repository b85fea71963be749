"""The orchestrator (runs in the CLI's process): prepare and probe a run, drive Locust, boot engines, run matrices.

``prepare`` validates and probes before any load and creates the run folder; ``run`` starts an engine
when needed, runs Locust in a child process and finishes the run; ``coldboot`` and ``matrix`` are the
studies built on those. Nothing here imports Locust or gevent at module level: the load path runs in
Locust's own processes (``loadgen.load``).
"""
