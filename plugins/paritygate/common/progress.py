"""What a long run is doing, for the person watching it (issue 37: no phase silent for more than 30 s).

The code that does the work opens steps; nothing here knows what a step is:

    with progress.step("efficientnetb0: tf2onnx conversion"):        # one blocking call: elapsed time is shown
        subprocess.run(cmd)
    with progress.step("property_parity examples", total=29) as s:    # a count: done/total and the time left
        for feed in feeds:
            ...
            s.advance()

Open steps nest (a check > its examples > a build inside one), each thread's apart (" | "); the line shows them all,
with each one's count, the innermost one's elapsed time and, where a count is known, the time left at the rate so
far. On a terminal it is one line rewritten in place about once a second and cleared when the outermost step ends.
Elsewhere (a CI log, a pipe) it is a plain line when a step has been open ``INTERVAL_S`` and again every
``INTERVAL_S`` while one is: a quick step prints nothing. A ``with`` block is all the code pays: a background thread
writes, the steps only update numbers.

Nothing is written until ``configure`` gives the stream: the plugin does, unless pytest runs with ``-q`` or in an
xdist worker (whose output no one sees). A library user and the suite's own unit tests see nothing.
"""

import os
import shutil
import sys
import threading
import time
from contextlib import contextmanager

# plain lines: the longest a running step stays silent (well inside issue 37's 30 s); PARITYGATE_PROGRESS_S sets it
INTERVAL_S = float(os.environ.get("PARITYGATE_PROGRESS_S") or 10.0)
TTY_TICK_S = 1.0  # a terminal's line is redrawn this often
PREFIX = "paritygate: "


class Step:
    """One open step: what it does, how far (``done`` of ``total``, when counted), since when."""

    def __init__(self, what, total=None, unit=""):
        self.what, self.total, self.unit = what, total, unit
        self.done, self.detail, self.started = 0, None, time.monotonic()
        self.thread = threading.get_ident()  # each thread's steps nest among themselves (``_Board.line``)

    def advance(self, n=1, detail=None):
        """``n`` more done; ``detail``: what the step is on now (shown after its count)."""
        self.done += n
        if detail is not None:
            self.detail = detail

    def describe(self, now, innermost):
        text = self.what
        if self.total:
            text += f" {min(self.done, self.total)}/{self.total}{' ' + self.unit if self.unit else ''}"
        if self.detail:
            text += f" ({self.detail})"
        if innermost:
            elapsed = now - self.started
            text += f", {elapsed:.0f} s"
            if self.total and 0 < self.done < self.total:
                text += f", ~{elapsed / self.done * (self.total - self.done):.0f} s left"
        return text


class _Board:
    """The open steps and the writer thread that shows them (one per process, while configured)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.steps = []
        self.write = None  # callable(text), unbuffered; None: nothing is shown
        self.tty = False
        self.column = None  # callable() -> the column another writer (pytest) left its line at, or None
        self.shown = None  # a terminal: the column of pytest's line our line went below (0: none), None: not shown
        self.broken_at = None  # plain lines: the column pytest's line had when our last line broke it
        self.last = 0.0  # when a plain line was last written
        self.wake = threading.Event()
        self.thread = None
        self.pid = None  # the configured process: a forked child shows nothing

    def line(self, now):
        """The open steps, each thread's nested ("a > b"), the threads in the order their first step opened
        (" | ": a build ``backend.ahead`` makes beside a check)."""
        chains = {}
        for s in self.steps:
            chains.setdefault(s.thread, []).append(s)
        return PREFIX + " | ".join(" > ".join(s.describe(now, i == len(chain) - 1) for i, s in enumerate(chain))
                                   for chain in chains.values())

    def show(self, now):
        """Write the state when due (called by the thread, and when the last step ends)."""
        if self.write is None or os.getpid() != self.pid:
            return
        if not self.steps:
            self.clear()
        elif self.tty and now - self.steps[0].started >= TTY_TICK_S:
            if self.shown is None:  # below pytest's unfinished line, put back where it was when cleared
                self.shown = self.column() if self.column is not None else 0
                self.write("\n" if self.shown else "")
            self.write(f"\r{self.line(now)[:shutil.get_terminal_size().columns - 1]}\x1b[K")  # no wrapped rows
        elif not self.tty and now - max(self.last, self.steps[0].started) >= INTERVAL_S:
            column = self.column() if self.column is not None else 0
            self.write(("\n" if column and column != self.broken_at else "") + self.line(now) + "\n")
            self.broken_at, self.last = column, now

    def clear(self):
        """A terminal: erase our line, the cursor back at the end of pytest's line."""
        if self.tty and self.shown is not None:
            self.write("\r\x1b[K" + (f"\x1b[1A\x1b[{self.shown}C" if self.shown else ""))
        self.shown = None

    def run(self):
        while self.write is not None:
            with self.lock:
                self.show(time.monotonic())
            self.wake.wait(max(0.05, TTY_TICK_S if self.tty else min(1.0, INTERVAL_S)))
            self.wake.clear()


BOARD = _Board()


def configure(write, tty=False, column=None):
    """Show the steps through ``write(text)`` (unbuffered): one line rewritten in place when ``tty``, else plain
    lines. ``column()``: where another writer of the stream (pytest's dots) left its current line, so that a
    progress line goes on a line of its own. Returns what was configured before, for ``close`` (a run inside a run,
    as pytester's, gives the outer one its stream back)."""
    with BOARD.lock:
        previous = (BOARD.write, BOARD.tty, BOARD.column, BOARD.pid)
        BOARD.write, BOARD.tty, BOARD.column, BOARD.pid = write, tty, column, os.getpid()
        BOARD.last, BOARD.shown, BOARD.broken_at = 0.0, None, None
    if write is not None and (BOARD.thread is None or not BOARD.thread.is_alive()):
        BOARD.thread = threading.Thread(target=BOARD.run, name="paritygate-progress", daemon=True)
        BOARD.thread.start()
    return previous


def close(previous=(None, False, None, None)):
    """Clear a terminal's line and show nothing more through this stream: ``previous`` (``configure``'s return)
    is shown through again."""
    with BOARD.lock:
        if BOARD.write is not None and os.getpid() == BOARD.pid:
            BOARD.clear()
        BOARD.write, BOARD.tty, BOARD.column, BOARD.pid = previous
        BOARD.shown = BOARD.broken_at = None
        BOARD.shown = None
    BOARD.wake.set()


def show_on(stream, column=None):
    """``configure`` on a copy of ``stream``'s file descriptor, taken now (a test's capture later swaps fd 1 under
    ``stream``, the copy keeps writing where the run's output goes); on a terminal when it is one. Returns the
    callable that stops it (and closes the copy); it does nothing when ``stream`` has no descriptor (an in-process
    pytester run)."""
    try:
        fd = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return lambda: None
    previous = configure(lambda text: os.write(fd, text.encode("utf-8", "replace")), os.isatty(fd), column)

    def stop():
        close(previous)
        os.close(fd)

    return stop


def show_in(config):
    """Show a pytest run's steps on its stdout (``show_on``), not under -q nor in an xdist worker (whose output no one
    sees): ``config`` is pytest's Config (the plugin's ``pytest_configure``). Returns what stops it."""
    if hasattr(config, "workerinput") or config.getoption("verbose") < 0:
        return lambda: None
    has = config.pluginmanager.has_plugin  # the terminal reporter registers after pytest_configure, or not at all
    return show_on(sys.stdout, lambda: config.get_terminal_writer().width_of_current_line
                   if has("terminalreporter") else 0)


@contextmanager
def step(what, total=None, unit=""):
    """An open step for the ``with`` block (see the module doc); yields the ``Step`` (``advance`` it)."""
    current = Step(what, total, unit)
    with BOARD.lock:
        BOARD.steps.append(current)
    try:
        yield current
    finally:
        with BOARD.lock:
            if current in BOARD.steps:
                BOARD.steps.remove(current)
            if not BOARD.steps:
                BOARD.show(time.monotonic())  # a terminal's line is cleared now, before anyone writes after it


def open_steps():
    """The text of the line as it would be shown now (tests; None when no step is open)."""
    with BOARD.lock:
        return BOARD.line(time.monotonic()) if BOARD.steps else None
