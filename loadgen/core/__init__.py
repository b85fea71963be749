"""The ground floor: the vocabulary every process shares, and nothing that runs.

Errors, the wire dialects, the scenario schema, the record and manifest types, completion identity,
claims, statistics and the pure option parsers. Every other package (the engine, the collectors, the
reports, the Locust side, the CLI) builds on it; it imports nothing else of the project, so a word
defined here means the same in every process. docs/design.md: "The house".
"""
