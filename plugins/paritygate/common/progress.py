"""What a long run is doing, for the person watching it (issue 37: no phase silent for more than 30 s).

The code that does the work opens steps; nothing here knows what a step is:

    with progress.step("efficientnetb0: tf2onnx conversion"):        # one blocking call: elapsed time is shown
        subprocess.run(cmd)
    with progress.step("property_parity examples", total=29) as s:    # a count: done/total and the time left
        for feed in feeds:
            ...
            s.advance()

Open steps nest (a check > its examples > a build inside one); the line shows them all, with each one's count, the
innermost one's elapsed time and, where a count is known, the time left at the rate so far. On a terminal it is one
line rewritten in place about once a second and cleared when the outermost step ends. Elsewhere (a CI log, a pipe)
it is a plain line when a step has been open ``INTERVAL_S`` and again every ``INTERVAL_S`` while one is: a quick
step prints nothing. A ``with`` block is all the code pays: a background thread writes, the steps only update
numbers.

Nothing is written until ``configure`` gives the stream: the plugin does, unless pytest runs with ``-q`` or in an
xdist worker (whose output no one sees). A library user and the suite's own unit tests see nothing.
"""

import os
import threading
import time
from contextlib import contextmanager

INTERVAL_S = 10.0  # plain lines: the longest a running step stays silent (well inside issue 37's 30 s)
TTY_TICK_S = 1.0  # a terminal's line is redrawn this often
PREFIX = "paritygate: "


class Step:
    """One open step: what it does, how far (``done`` of ``total``, when counted), since when."""

    def __init__(self, what, total=None, unit=""):
        self.what, self.total, self.unit = what, total, unit
        self.done, self.detail, self.started = 0, None, time.monotonic()

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
        self.write = None  # callable(text): the stream's write, flushed; None: nothing is shown
        self.tty = False
        self.fresh_line = None  # callable() -> True when the stream's current line holds text of someone else's
        self.shown = None  # the text on a terminal's line now, or None
        self.last = 0.0  # when a plain line was last written
        self.wake = threading.Event()
        self.thread = None
        self.pid = None  # the configured process: a forked child shows nothing

    def line(self, now):
        steps = list(self.steps)
        return PREFIX + " > ".join(s.describe(now, i == len(steps) - 1) for i, s in enumerate(steps))

    def show(self, now):
        """Write the state when due (called by the thread, and by a step that ends on a terminal)."""
        if self.write is None or os.getpid() != self.pid:
            return
        if not self.steps:
            if self.tty and self.shown is not None:
                self.write("\r\x1b[K")
                self.shown = None
            return
        if self.tty:
            text = self.line(now)
            if self.shown is None and self.fresh_line is not None and self.fresh_line():
                self.write("\n")
            self.write(f"\r{text}\x1b[K")
            self.shown = text
        elif now - max(self.last, self.steps[0].started) >= INTERVAL_S:
            text = self.line(now)
            self.write(("\n" if self.fresh_line is not None and self.fresh_line() else "") + text + "\n")
            self.last = now

    def run(self):
        while self.write is not None:
            with self.lock:
                self.show(time.monotonic())
            self.wake.wait(TTY_TICK_S if self.tty else 1.0)
            self.wake.clear()


BOARD = _Board()


def configure(write, tty=False, fresh_line=None):
    """Show the steps through ``write(text)`` (it flushes): one line rewritten in place when ``tty``, else plain
    lines. ``fresh_line()``: True when the stream's current line holds another writer's text (pytest's dots), so
    that a progress line starts on a line of its own. ``write`` None: show nothing (``close``)."""
    with BOARD.lock:
        BOARD.write, BOARD.tty, BOARD.fresh_line, BOARD.last, BOARD.pid = write, tty, fresh_line, 0.0, os.getpid()
    if write is not None and (BOARD.thread is None or not BOARD.thread.is_alive()):
        BOARD.thread = threading.Thread(target=BOARD.run, name="paritygate-progress", daemon=True)
        BOARD.thread.start()


def close():
    """Clear a terminal's line and stop showing anything."""
    with BOARD.lock:
        BOARD.steps.clear()
        BOARD.show(time.monotonic())
        BOARD.write = None
    BOARD.wake.set()


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
