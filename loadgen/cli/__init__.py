"""The ``loadgen`` command line (the process a user starts): ``main`` parses and renders errors.

Each subcommand module registers its parser and maps arguments onto one library call; nothing here
computes a figure or sends a request. Subcommands are imported when chosen, so ``loadgen serve``
starts the engine without loading the analysis or load stacks.
"""
