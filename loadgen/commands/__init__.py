"""Subcommands: each module registers its parser and maps arguments onto one library call."""
