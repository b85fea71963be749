"""The writers at the edge: a finished report as Markdown, HTML and SVG, and the files (``writer``, ``export``).

Renderers consume the report only (``reports.model``); ``writer`` ties ``reports.analysis.build`` to them and
to the run folder. This file imports nothing, so the Locust side's light crossings (``svg``, ``cells``,
``htmltext``) load no pandas.
"""
