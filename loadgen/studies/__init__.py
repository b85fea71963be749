"""The orchestrator (runs in the CLI's process): drive Locust, boot engines, run matrices and searches.

``run`` starts an engine when needed, runs Locust in a child process and ends the run through
``loadgen.runs``; ``coldboot``, ``matrix`` and ``onset`` are the studies built on it. Nothing here
imports Locust or gevent at module level: the load path runs in Locust's own processes
(``loadgen.load``).
"""
