"""The typed shapes of what the reports write: ``report.json`` (``report``; its co-residency types:
``coresidency``), ``comparison.json`` (``comparison``), the one shape check (``conform``) and the rule for
their numbers (``finite``). Imports nothing of the project.

This file imports nothing, so the Locust processes that type a report (``reports.model.report``) load no pandas.
"""
