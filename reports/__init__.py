"""Reports: turn run folders into answers (report.json / .md / .html), compare runs, gate CI.

Must never import Locust, ``loadgen.load`` or anything that monkey-patches with gevent; only
``loadgen.errors`` from the ``loadgen`` package. Analysis modules are pure; writers sit at the edge.
This file imports nothing: the Locust process uses ``reports.identity`` for its live table and must
not load pandas with it.
"""
