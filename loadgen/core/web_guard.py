"""Whether an HTTP request to one of our own servers comes from another web page, or through a foreign host name.

Why: two servers of this project listen on a port a browser can reach: Locust's web UI (``loadgen run --ui``,
``loadgen/load/webui.py``) and the embedded engine (``loadgen serve``, ``loadgen/engine/server.py``). Any page
the user opens can POST to ``http://127.0.0.1:PORT``: start a run that sends the API key, reset the engine's
prefix cache or add load during a measured run. Browsers send ``Origin`` on every cross-origin POST (form or
script), so a request whose ``Origin`` (for a state-changing method without one: its ``Referer``) is not the
server's own address is refused; a request with neither is a script or curl on a machine that can reach the
port, and goes through. Bound to a loopback address, a server answers only to loopback host names: a
DNS-rebound name would otherwise count as its own origin. One decision, here, for both servers; each renders
the refusal in its own shape. Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# sent with every answer of the web UI: no other page may frame it (a click-jacked Start button)
NO_FRAMING = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}


def is_loopback(host: str) -> bool:
    """Whether a host name or address (no port, no brackets) names this machine's loopback interface."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def foreign_request(
    *,
    bind_host: str,
    scheme: str,
    host: str,
    method: str,
    origin: str | None,
    referer: str | None,
    server: str,
) -> str | None:
    """Why this request must be refused (module docstring), or None. ``host``: its ``Host`` header (name and
    port); ``server``: what the message calls the server ("this web UI")."""
    name = urlsplit(f"//{host}").hostname or ""
    if is_loopback(bind_host) and not is_loopback(name):
        return f"host {name!r} refused: {server}, bound to {bind_host}, answers loopback names only"
    own = f"{scheme}://{host}".lower()
    if origin is None and method.upper() in UNSAFE_METHODS and referer:
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    if origin is not None and origin.lower() != own:
        return f"request from {origin} refused: {server} takes requests only from its own page, {own}"
    return None
