"""Collectors: what a run writes to its folder and how it is read back, over ``loadgen.core``'s record types.

Nothing here imports Locust or ``loadgen`` beyond ``loadgen.core``: ``reports`` reads run folders
through ``collectors.read.runfolder`` and must stay free of gevent's monkey-patching.
"""
