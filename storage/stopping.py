"""A stop signal (SIGTERM, SIGINT) ends the process that writes a data root or runs a command's
flows, wherever in the code it lands.

Python runs a signal's handler in the main thread, between two steps of whatever runs there,
and the exception the handler raises can be lost on its way out. While a flow runs, SIGTERM's
handler is Prefect's (it raises ``TerminationSignal``); a command's own raises :class:`Stopped`.
With Prefect 3.8.8 (``tests/storage/test_stopping.py`` shows each): a stop raised once a subflow
run is final is dropped by Prefect's engine (logged at debug level, "BaseException was raised
after user code finished executing") and the parent flow goes on; one raised while a task run is
being created becomes Prefect's ``ValueError('Task run is not set')``, which code that takes a
failed step in its stride (``except Exception``) swallows; one raised in a finalizer (``__del__``,
a weakref callback) is only printed ("Exception ignored in ...").

:func:`stops_honoured` makes a stop stick. The interpreter writes each signal's number to a
wakeup fd (:func:`signal.set_wakeup_fd`) before any Python handler runs, whichever handler is in
force; a watcher thread reads it and, while the main thread is not unwinding a stop, sends the
signal to the main thread again every :data:`RESEND_S` seconds until it is; a block that ends
without unwinding the stop raises :class:`Stopped` as it ends.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

RESEND_S = 1.0
"""How often a stop that nothing is unwinding is sent to the main thread again."""
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


class Stopped(BaseException):
    """SIGTERM or SIGINT reached a process that runs flows: raised where it was, so that its flows
    record their end and the data root's lock is released (``BaseException``: no handler takes it
    for a failed input or step)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_signal(exc: BaseException | None) -> int | None:
    """The signal that stopped the process, if ``exc`` is, or came of, a stop: :class:`Stopped`,
    ``KeyboardInterrupt``, or Prefect's ``TerminationSignal`` (SIGTERM while a flow runs; one that
    landed as a task run was being created surfaces as Prefect's own error, with the signal in
    its context)."""
    termination = getattr(sys.modules.get("prefect.exceptions"), "TerminationSignal", ())
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, Stopped):
            return exc.signum
        if isinstance(exc, KeyboardInterrupt):
            return signal.SIGINT
        if isinstance(exc, termination):
            return int(exc.signal)
        exc = exc.__cause__ or exc.__context__
    return None


def raise_stopped(signum: int, _frame) -> None:
    """A handler for SIGTERM and SIGINT: raise :class:`Stopped`, unless the main thread is
    already unwinding a stop (a second signal, or a resent one, would cut its clean-up short)."""
    if stop_signal(sys.exc_info()[1]) is None:
        raise Stopped(signum)


def _handled(thread_id: int) -> BaseException | None:
    """The exception the thread is handling now (in an ``except``, ``finally`` or ``__exit__``)."""
    exc = sys._current_exceptions().get(thread_id)
    return exc[1] if isinstance(exc, tuple) else exc  # a sys.exc_info() triple before Python 3.12


class _Watcher:
    """Reads the signal numbers the interpreter writes to the wakeup fd, and insists on a stop
    while a :func:`stops_honoured` block is open."""

    def __init__(self, read_fd: int):
        self.read_fd = read_fd
        self.depth = 0
        self.signum: int | None = None
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, name="mosaic-stops", daemon=True).start()

    def _take(self) -> None:
        """Note the first stop signal written since the last look (outside a block: none)."""
        while True:
            try:
                heard = os.read(self.read_fd, 512)
            except BlockingIOError:
                return
            if self.depth and self.signum is None:
                self.signum = next((n for n in heard if n in STOP_SIGNALS), None)

    def _watch(self) -> None:
        main = threading.main_thread().ident
        while True:
            heard = select.select([self.read_fd], [], [], None if self.signum is None else RESEND_S)[0]
            with self.lock:  # the block cannot close between the check and the send
                if heard:
                    self._take()
                elif self.depth and self.signum is not None and stop_signal(_handled(main)) is None:
                    signal.pthread_kill(main, self.signum)

    def enter(self) -> None:
        with self.lock:
            self._take()  # signals from before the block are not its stop
            self.depth += 1

    def leave(self) -> int | None:
        """Close one block; the stop it was told of, if any (forgotten once the outermost closes)."""
        with self.lock:
            self._take()  # a signal the watcher has not read yet
            self.depth -= 1
            signum = self.signum
            if self.depth == 0:
                self.signum = None
            return signum


_WATCHER: _Watcher | None = None


def _forget_in_child() -> None:
    """A forked child has no watcher thread: the signals it gets are its own, not the parent's. (A
    signal the child gets before this hook runs, in the instant after the fork, is still written to
    the parent's pipe and stops the parent.)"""
    global _WATCHER
    if _WATCHER is not None:
        signal.set_wakeup_fd(-1)
        _WATCHER = None


def _watcher() -> _Watcher | None:
    """The process's watcher, started on first use; None outside the main thread (the wakeup fd
    is the main thread's), or where another owner (an asyncio loop's signal handling) has it."""
    global _WATCHER
    if _WATCHER is None and threading.current_thread() is threading.main_thread():
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            return None
        _WATCHER = _Watcher(read_fd)
    return _WATCHER if threading.current_thread() is threading.main_thread() else None


os.register_at_fork(after_in_child=_forget_in_child)


@contextmanager
def stops_honoured() -> Iterator[None]:
    """Within the block, a SIGTERM or SIGINT to the process ends the block, wherever it lands:
    sent to the main thread again until a stop unwinds the block, or raised as :class:`Stopped`
    when the block ends without one (normally, or on another exception). Re-entrant; outside the
    main thread, it changes nothing."""
    watcher = _watcher()
    if watcher is None:
        yield
        return
    watcher.enter()
    try:
        yield
    except BaseException as exc:
        if (signum := watcher.leave()) is not None and stop_signal(exc) is None:  # e.g. click's exit
            raise Stopped(signum) from exc
        raise
    if (signum := watcher.leave()) is not None:
        raise Stopped(signum)
