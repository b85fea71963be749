"""The "Batch invariance" tab in Locust's web UI, the run's report served from it, and the UI's guard.

Why: users start scenarios from the web UI and should watch determinism live: a table per canary
and level (canaries, errors, unique completions, diverged, divergence rate with its 95% interval,
earliest divergence, held at send; and the report's drift max, bitwise equal, others and held
throughout, filled in once the run's report is written: ``loadgen.load.live``) refreshed with
Locust's own stats poll, charts of the same rows beside it, and a link to the finished report. Uses
Locust's extension points (``extended_tabs``/``extended_tables``/``extended_stats``,
``extended_csv_files``) and its Flask app; runs inside the Locust process. The table is Locust's
(its React tables escape text). A tab can hold nothing but that table, so the charts come from a
small same-origin script (``webui_chart.js``, no network beyond this UI) that the index page loads:
it places a box after the tab's table and, each time the table's rows change, fetches the charts
from ``CHART_ROUTE`` (inline SVG drawn by ``live_chart``, every label escaped there).

Why the guard (``protect``): Locust's UI takes a start from anyone who can reach it, answers every
origin (it enables CORS for all), and a start sends the scenario's API key to the run's host. Any web
page the user opens could POST a form to ``http://127.0.0.1:8089/swarm`` and start a run against a
host and folder of its choosing. So the UI refuses (403) any request whose ``Origin`` (for a
state-changing method, else its ``Referer``) is not the UI's own page; browsers send ``Origin`` on
every cross-origin POST, form or script, so a request with neither header is a script or curl on this
machine, and goes through. Bound to a loopback address, the UI answers only to loopback host names
(a DNS-rebound name would otherwise count as its own origin); that rule is ``loadgen.core.web_guard``'s,
shared with the embedded engine. No answer may be framed by another page, and ``/user`` (Locust's change of
user classes and counts) is refused: they are fixed at launch. A start's form may not change host,
scenario or out-dir (``loadgen.load.options.Launch``). ``--web-login`` (Locust's own flag, which
needs the locustfile to provide the login) gets a user name and password from the environment.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flask import Response, jsonify, make_response, redirect, request, send_file, session, url_for
from flask_login import login_user  # type: ignore[import-untyped]
from locust.web import WebUI

from loadgen.core.web_guard import NO_FRAMING, foreign_request, is_loopback
from loadgen.load import live_chart

TAB_KEY = "batch-invariance"
REPORT_ROUTE = "/loadgen/report"
CHART_ROUTE = "/loadgen/live-chart"
SCRIPT_ROUTE = "/loadgen/live-chart.js"
SCRIPT = Path(__file__).with_name("webui_chart.js")
COLUMNS = [
    ("canary", "Canary"),
    ("level", "Concurrency"),
    ("canaries", "Canaries"),
    ("errors", "Errors"),
    ("unique", "Unique completions"),
    ("diverged", "Diverged"),
    ("rate", "Rate (95% CI)"),
    ("earliest", "Earliest divergence"),
    ("drift_max", "Drift max"),
    ("bitwise", "Bitwise equal"),
    ("others", "Others min/med/max"),
    ("held_at_send", "Held at send"),
    ("held_throughout", "Held throughout"),
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

    login_required: Callable[[Callable[[], Response]], Callable[[], Response]] = web_ui.auth_required_if_enabled

    @app.route(REPORT_ROUTE)
    @login_required  # with --web-login, as Locust's own pages
    def _report() -> Response:
        path = report()
        if path is None:
            return make_response("No finished run yet: the report is written when a run ends.", 404)
        # resolved here, against this process's working directory: Flask reads a relative path against the
        # app's package folder, and a run folder is relative with the default --out
        return send_file(path.resolve(), mimetype="text/html")

    @app.route(CHART_ROUTE)
    @login_required
    def _chart() -> Response:
        response = make_response(live_chart.render(table()))
        response.mimetype = "text/html"
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.route(SCRIPT_ROUTE)
    @login_required
    def _chart_script() -> Response:
        return send_file(SCRIPT, mimetype="text/javascript", max_age=0)

    @app.after_request
    def _load_chart_script(response: Response) -> Response:
        if request.endpoint != "locust.index" or response.status_code != 200 or response.mimetype != "text/html":
            return response
        page = response.get_data(as_text=True)
        if "</body>" in page:  # Locust's page, not a login form or an error text
            tag = f'<script src="{SCRIPT_ROUTE}" defer></script>'
            response.set_data(page.replace("</body>", tag + "</body>", 1))
        return response


LOGIN_ROUTE = "/loadgen/login"
log = logging.getLogger("loadgen")
# Locust routes a start's policy refuses whatever the form says: ``/user`` changes user classes and counts
REFUSED_ENDPOINTS = {"locust.update_user": "user classes and counts"}


def protect(web_ui: WebUI, *, bind_host: str, check_start: Callable[[Mapping[str, str]], str | None]) -> None:
    """Refuse requests from other web pages, and starts whose form ``check_start`` refuses (module docstring)."""
    app = web_ui.app
    assert app is not None
    if not is_loopback(bind_host):
        log.warning("web UI: bound to %s, it answers any host name (no loopback check)", bind_host)

    @app.before_request
    def _guard() -> Response | None:
        why = foreign_request(
            bind_host=bind_host,
            scheme=request.scheme,
            host=request.host,
            method=request.method,
            origin=request.headers.get("Origin"),
            referer=request.headers.get("Referer"),
            server="this web UI",
        )
        if why:
            return _refuse(why)
        if (what := REFUSED_ENDPOINTS.get(request.endpoint or "")) is not None:
            return _refuse(f"{what}: fixed when the web UI was started; start it again to change them")
        if request.endpoint == "locust.swarm" and (why := check_start(request.form)):
            return _refuse(why, status=200)  # as Locust answers a bad form value: its page shows the message
        return None

    @app.after_request
    def _no_framing(response: Response) -> Response:
        response.headers.update(NO_FRAMING)
        return response


def _refuse(why: str, status: int = 403) -> Response:
    log.warning("web UI: %s %s refused: %s", request.method, request.path, why)
    response = jsonify({"success": False, "message": why})
    response.status_code = status
    return response


class _User:
    """The one user of ``--web-login``, as Flask-Login wants it."""

    is_authenticated = is_active = True
    is_anonymous = False

    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name


def install_login(web_ui: WebUI, *, user: str, password: str) -> None:
    """What Locust's ``--web-login`` expects the locustfile to provide: a user loader and a login form."""
    app = web_ui.app
    assert app is not None
    app.config["SECRET_KEY"] = secrets.token_hex(32)  # sessions last as long as this process
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"

    def load_user(name: str) -> _User | None:
        return _User(name) if hmac.compare_digest(name.encode(), user.encode()) else None

    web_ui.login_manager.user_loader(load_user)
    base = (web_ui.environment.parsed_options.web_base_path or "") if web_ui.environment.parsed_options else ""
    web_ui.auth_args = {"username_password_callback": base + LOGIN_ROUTE}

    @app.route(base + LOGIN_ROUTE, methods=["POST"])
    def _login() -> Any:
        given_user = request.form.get("username", "").encode()
        given_password = request.form.get("password", "").encode()
        ok = hmac.compare_digest(given_user, user.encode()) & hmac.compare_digest(given_password, password.encode())
        if not ok:
            session["auth_error"] = "Wrong user name or password"
            return redirect(url_for("locust.login"))
        login_user(_User(user))
        return redirect(url_for("locust.index"))
