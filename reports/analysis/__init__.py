"""Pure analysis: a run folder's columns in, the typed pieces of ``reports.model`` out (``build.build_report``).

Imports ``reports.model`` and the reader (``collectors.read``), never a renderer. This file imports nothing, so
the Locust side's one crossing here (``reports.analysis.health``'s status rule) loads no pandas.
"""
