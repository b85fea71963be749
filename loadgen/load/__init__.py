"""Everything that runs inside Locust's processes: users, load shape, stage coordination, the HTTP client.

The only package that imports Locust or gevent (a test walks the imports to keep it so). ``locustfile``
wires users and the shape to Locust's events; the rest are small parts it uses: ``client`` (one timed
request, faults as data), ``canary_request`` and ``background`` (bodies and records), ``stages`` and
``coordination`` (which level, how many canaries), ``live`` (the web UI's live table), ``webui``.
"""
