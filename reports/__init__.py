"""Reports: turn run folders into answers (report.json / .md / .html), compare runs, gate CI.

Must never import Locust, ``loadgen.load`` or anything that monkey-patches with gevent; from the
``loadgen`` package only ``loadgen.core``. Analysis modules are pure; writers sit at the edge. This
file imports nothing, so importing one light module (``reports.render.svg``) loads no pandas.
"""
