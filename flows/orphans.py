"""A deployment's flow run stops when the process that started it dies.

`mosaic serve` (Prefect's runner) and a process worker run each flow run in a child process
(``python -m prefect.engine``). A ``kill -9`` of the serve or the worker leaves that child
running, adopted by init, and holding the data root's writer lock until its run ends (the whole
pipeline, if it was training): a restarted serve's next run would be Skipped all that time, and
nothing would show the orphan. So a deployment run watches its parent; once it is gone, the run
stops as a command stops on ``^C``: SIGTERM to itself, so that its flows record that they
crashed and the lock is released, then SIGKILL if it is still running after a grace period
(the kernel releases the lock then too).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

POLL_S = 1.0
GRACE_S = 30.0
_WATCHING: list[int] = []


def stop_with_parent(poll_s: float = POLL_S, grace_s: float = GRACE_S) -> None:
    """Stop this process within ``poll_s`` of its parent's death (SIGTERM; SIGKILL ``grace_s``
    later). Starts one watcher thread per process; further calls do nothing."""
    if _WATCHING:
        return
    parent = os.getppid()
    _WATCHING.append(parent)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        # Signals first: the log record goes through handlers whose locks a stuck writer may hold.
        os.kill(os.getpid(), signal.SIGTERM)
        last_resort = threading.Timer(grace_s, os.kill, (os.getpid(), signal.SIGKILL))
        last_resort.daemon = True
        last_resort.start()
        log.warning("the process that started this run (pid %d: its serve or worker) is gone: stopping the run, "
                    "which keeps every finished step and a training stage's last checkpoint", parent)

    threading.Thread(target=watch, name="stop-with-parent", daemon=True).start()
