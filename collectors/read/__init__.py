"""The report-side reader: a run folder read back into columns (``runfolder``), for ``reports``, never for Locust.

Over ``columns`` (the column types and the reference builder), ``fastcolumns`` (the same columns without
per-token Python, from lines cut by ``linecut``), ``sidecar`` (a canary file read through its columns file) and
``parallel`` (a big run read in byte ranges by several processes), and measured co-residency (``coresidency``).
The writers that run in Locust processes (``collectors.canary``, ``collectors.sidecar``, ...) never import it.
"""
