"""The "Batch invariance" tab in Locust's web UI, and the run's report served from it.

Why: users start scenarios from the web UI and should watch determinism live: a table per canary
and level (canaries, errors, unique completions, diverged, earliest divergence) refreshed with
Locust's own stats poll, and a link to the finished report. Uses Locust's extension points
(``extended_tabs``/``extended_tables``/``extended_stats``, ``extended_csv_files``) and its Flask app;
runs inside the Locust process. It renders nothing itself: the UI's React tables escape text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Response, make_response, request, send_file
from locust.web import WebUI

TAB_KEY = "batch-invariance"
REPORT_ROUTE = "/loadgen/report"
COLUMNS = [
    ("canary", "Canary"),
    ("level", "Concurrency"),
    ("canaries", "Canaries"),
    ("errors", "Errors"),
    ("unique", "Unique completions"),
    ("diverged", "Diverged"),
    ("earliest", "Earliest divergence"),
]


def install_tab(web_ui: WebUI, *, table: Callable[[], list[dict[str, Any]]], report: Callable[[], Path | None]) -> None:
    app = web_ui.app
    assert app is not None
    web_ui.template_args["extended_tabs"] = [{"title": "Batch invariance", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": k, "title": t} for k, t in COLUMNS]}
    ]
    web_ui.template_args["extended_csv_files"] = [
        {"href": REPORT_ROUTE, "title": "Batch-invariance report of the last finished run (HTML)"}
    ]

    @app.after_request
    def _add_live_table(response: Response) -> Response:
        if request.path != "/stats/requests" or response.status_code != 200:
            return response
        data = response.get_json()
        if isinstance(data, dict):
            data["extended_stats"] = [{"key": TAB_KEY, "data": table()}]
            response.set_data(json.dumps(data))
        return response

    @app.route(REPORT_ROUTE)
    def _report() -> Response:
        path = report()
        if path is None:
            return make_response("No finished run yet: the report is written when a run ends.", 404)
        return send_file(path, mimetype="text/html")
