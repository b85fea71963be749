"""Build tooling for CI and local trials; not part of the installed package."""
