"""The project's error tree.

Library code raises these; only the CLI renders them and picks exit codes. Faults from an
endpoint during a run are not errors here: they become records with an ``error_kind``.
"""

from __future__ import annotations


class LoadgenError(Exception):
    """Base of every error the CLI renders as a one-line message (exit code 2)."""


class ScenarioError(LoadgenError):
    """A scenario file is unreadable or invalid; the message names the file and the field."""


class EndpointError(LoadgenError):
    """The endpoint cannot be used (unreachable, not OpenAI-compatible, unknown model); names the URL."""


class RunFolderError(LoadgenError):
    """A run folder is missing, unreadable or of an unknown schema; names the path."""


class EngineError(LoadgenError):
    """An engine process could not be started or never became healthy; carries command and log tail."""


class UsageError(LoadgenError):
    """A command-line value is invalid; names the option."""
