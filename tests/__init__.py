"""The test suite, a package: tests and their helpers import one another as ``tests.<folder>.<module>``."""
