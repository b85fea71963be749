"""Progress of long commands on a terminal or in a log, and the summary that ends ``loadgen run``.

``model`` (pure: where a run stands, from its canary records), ``follow`` (reads a run folder's
records as they are written), ``text`` (the words), ``display`` (a live view, plain lines, or
nothing; always on standard error), ``printer`` (the studies' progress callback), ``summary`` (the
verdict and per-level table printed at the end). See docs/running.md, "Progress output".
"""
