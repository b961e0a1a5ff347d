"""A function in a spawned process beside this one, for a pipeline stage (`parallel: true` in a run config).

Written by hand: multiprocessing and concurrent.futures run the function, but not what a training stage
beside another one needs: its log lines in the run's own log, the CPU threads split between the two
processes and all of them to the child once this process only waits, and a child that never outlives
the run (a resumed run would otherwise train into the same folder twice).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable


class Background:
    """`fn(out=out, log=..., **kwargs)` in a spawned process; `wait()` joins it, `cancel()` stops it."""

    def __init__(self, name: str, fn: Callable[..., Any], out: Path, kwargs: dict[str, Any], log: Callable[[str], None]):
        import multiprocessing

        import torch

        ctx = multiprocessing.get_context("spawn")
        self.threads = torch.get_num_threads()
        mine = max(1, self.threads // 2)
        theirs = max(1, self.threads - mine)
        self.lines, self.idle = ctx.Queue(), ctx.Event()
        self.seconds: float | None = None
        # daemon: stopped when this process exits, even on an error it does not catch
        self.child = ctx.Process(target=_child, name=f"trace-{name}", daemon=True,
                                 args=(fn, out, kwargs, theirs, self.threads, os.getpid(), self.lines, self.idle))
        self.child.start()
        torch.set_num_threads(mine)
        self.reader = threading.Thread(target=self._read, args=(log,), daemon=True)
        self.reader.start()
        log(f"[{name}] in a background process (pid {self.child.pid}), {theirs} of {self.threads} threads "
            "until this one waits for it")

    def _read(self, log: Callable[[str], None]) -> None:
        while (item := self.lines.get()) is not None:
            kind, value = item
            if kind == "log":
                log(value)
            else:
                self.seconds = value

    def wait(self) -> int | None:
        """Join the child (it takes every thread from its next log line on); its exit code."""
        self.idle.set()
        self.child.join()
        return self._close()

    def cancel(self) -> None:
        if self.child.is_alive():
            self.child.terminate()
            self.child.join()
        self._close()

    def _close(self) -> int | None:
        import torch

        if self.reader.is_alive():
            self.lines.put(None)  # after everything the finished child sent: the reader drains it first
            self.reader.join()
        torch.set_num_threads(self.threads)
        return self.child.exitcode


def _child(fn, out: Path, kwargs: dict[str, Any], threads: int, all_threads: int, parent: int, lines, idle) -> None:
    try:  # Linux: die with the parent even when it is killed, not only when it exits
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        return
    import torch

    torch.set_num_threads(threads)

    def log(message: str) -> None:
        if idle.is_set() and torch.get_num_threads() != all_threads:
            torch.set_num_threads(all_threads)
        lines.put(("log", message))

    started = time.time()
    fn(out=out, log=log, **kwargs)
    lines.put(("seconds", round(time.time() - started, 1)))
