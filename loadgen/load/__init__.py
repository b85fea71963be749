"""Everything that runs inside Locust's processes: users, load shape, stage coordination, the HTTP client.

The only package that imports Locust or gevent (a test walks the imports to keep it so). ``locustfile``
(the file Locust loads) wires Locust's events and messages to the run's two sides, ``coordinator`` and
``user_side``, each one object per process on Locust's ``Environment``; ``users`` and ``shape`` are what
Locust runs; the rest are small parts they use: ``client`` (one timed request, faults as data),
``canary_request`` and ``background`` (bodies and records), ``stages`` and ``coordination`` (which level,
how many canaries), ``holding`` (a held level), ``live`` (the web UI's live table), ``webui``.
"""
