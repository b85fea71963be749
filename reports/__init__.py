"""Reports: turn run folders into answers (report.json / .md / .html), compare runs, gate CI.

Must never import Locust, ``loadgen.locustfile`` or anything that monkey-patches with gevent; only
``loadgen.errors`` from the ``loadgen`` package. Analysis modules are pure; writers sit at the edge.
"""

from reports.build import build_report
from reports.check import Threshold, check_report
from reports.compare import compare_reports, write_comparison
from reports.export import export_records
from reports.writer import write_reports

__all__ = [
    "Threshold",
    "build_report",
    "check_report",
    "compare_reports",
    "export_records",
    "write_comparison",
    "write_reports",
]
