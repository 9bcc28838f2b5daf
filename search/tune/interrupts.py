"""Stopping a tuning run cleanly on Ctrl-C (SIGINT) or SIGTERM.

    with stop_on_signals() as stop:      # the first signal raises Interrupted in the main
        tuner = Tuner(..., stop=stop)    # thread and sets `stop`; tuner threads see it
        tuner.tune_all(problems)         # before each batch and raise Interrupted too

What a stop leaves behind: every result told so far stays in the study; the trials a run
was measuring are failed with the reason ("interrupted by SIGINT") and their programs
queued again (search.tune.tuner), so a rerun measures them. Later signals during the stop are
ignored: the cleanup finishes. The command exits 128 + the signal (130, 143).
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was stopped by signal `signum` (a KeyboardInterrupt, so code that lets
    Ctrl-C through lets this through too)."""

    def __init__(self, signum: int = signal.SIGINT):
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal.Signals(self.signum).name}")


class Stop:
    """A stop request shared by a run's threads: `signum` once set, else None."""

    def __init__(self):
        self._event = threading.Event()
        self.signum: int | None = None
        self.shields = 0  # the main thread is in a section a signal must not cut

    @contextmanager
    def shield(self):
        """Within the block a signal only sets the stop (in the main thread; other threads
        never see the signal): trials asked but not yet claimed are never left RUNNING.
        The caller checks the stop after the block."""
        main = threading.current_thread() is threading.main_thread()
        self.shields += main
        try:
            yield
        finally:
            self.shields -= main

    def set(self, signum: int = signal.SIGINT) -> None:
        if self.signum is None:
            self.signum = int(signum)
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise Interrupted if a stop was requested."""
        if self._event.is_set():
            raise Interrupted(self.signum or signal.SIGINT)

    @property
    def reason(self) -> str:
        return f"interrupted by {signal.Signals(self.signum or signal.SIGINT).name}"


@contextmanager
def stop_on_signals(stop: Stop | None = None):
    """Within the block, SIGINT and SIGTERM set `stop` (a new Stop if None) and, the first
    time, raise Interrupted in the main thread unless it is inside `stop.shield()`; yields
    the Stop. Outside the main thread
    (where handlers can't be installed) it only yields the Stop."""
    stop = stop or Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        first = not stop.is_set()
        stop.set(signum)
        if first and not stop.shields:
            raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield stop
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
