"""A run folder's birth and end: prepare and probe before any load, then own and settle the run.

Used by both the CLI's studies and the Locust process (a web UI start prepares its own folder), so
it sits below both and imports neither. ``prepare`` validates, probes and writes the manifest;
``probe`` asks the endpoint what it can return; ``lifecycle`` starts the metrics scraper, settles
the final status and writes the reports. No Locust or gevent.
"""
