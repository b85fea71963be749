"""``kill -USR1 PID`` prints every thread's Python stack to the process's stderr (its log, for Locust).

Why: a run that will not stop (a signal not acted on, a wait that never ends) leaves nothing to read
but its log; a stack dump taken while it hangs says where. Every loadgen process asks for it: the CLI
(``loadgen.cli.main``, which also serves ``loadgen serve``) and each Locust process (the locustfile).
``faulthandler`` writes from the signal handler itself, in C, so it works while the main thread is
blocked in a system call or in gevent's event loop. It changes nothing else: no handler is chained,
and a platform without SIGUSR1 is left as it is.
"""

from __future__ import annotations

import faulthandler
import signal
import sys


def dump_stacks_on_usr1() -> None:
    """Register the dump on SIGUSR1 (where the platform has it); safe to call more than once. Written to the
    process's own standard error (``sys.__stderr__``): a caller that redirected ``sys.stderr`` into memory (the
    CLI called in-process, as tests call it) has no file descriptor there, and the dump needs one."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is not None and sys.__stderr__ is not None:
        faulthandler.register(usr1, file=sys.__stderr__, all_threads=True)
