"""Collectors: what a run writes to its folder, and the record types shared with the reports.

Nothing here imports Locust at module level: ``reports`` imports ``collectors.record`` and
``collectors.runfolder`` and must stay free of gevent's monkey-patching.
"""
