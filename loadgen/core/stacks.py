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


def dump_stacks_on_usr1() -> None:
    """Register the dump on SIGUSR1 (where the platform has it); safe to call more than once."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is not None:
        faulthandler.register(usr1, all_threads=True)
