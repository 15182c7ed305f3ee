"""The progress line (paritygate.common.progress): what a step shows, when plain lines come, a terminal's line
cleared, nothing without a stream; and through the plugin: lines on a run's stdout, none under -q."""

import time

import pytest

from paritygate.common import progress


@pytest.fixture
def shown(monkeypatch):
    """The text written, with steps shown at once (no 10 s wait) and the writer thread's work done by ``tick``."""
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    monkeypatch.setattr(progress, "TTY_TICK_S", 0.0)
    out = []
    previous = progress.configure(out.append)
    yield out
    progress.close(previous)


def tick():
    with progress.BOARD.lock:
        progress.BOARD.show(time.monotonic())


def test_nested_steps_show_counts_elapsed_time_and_what_is_left(shown):
    with progress.step("[3/25] matches_reference[m-fp16]"), progress.step("examples", total=4) as examples:
        examples.started -= 30  # 30 s ago
        examples.advance()
        tick()
    line = shown[-1]
    assert line.startswith("paritygate: [3/25] matches_reference[m-fp16] > examples 1/4, 30 s, ~90 s left")
    assert line.endswith("\n")


def test_a_thread_beside_the_check_shows_its_own_steps_after_a_bar(shown):
    """``backend.ahead`` builds while a check runs: its steps are not nested in the check's."""
    import threading

    opened, done = threading.Event(), threading.Event()

    def build():
        with progress.step("ahead of its checks: m fp16"), progress.step("building onnx m-fp16"):
            opened.set()
            done.wait(5)

    with progress.step("[3/25] property_parity[m-fp32]"):
        other = threading.Thread(target=build)
        other.start()
        opened.wait(5)
        with progress.step("examples", total=4):
            line = progress.open_steps()
        done.set()
        other.join()
    assert line.startswith("paritygate: [3/25] property_parity[m-fp32] > examples 0/4, 0 s | "
                           "ahead of its checks: m fp16 > building onnx m-fp16, 0 s"), line


def test_a_step_without_a_count_shows_its_elapsed_time(shown):
    with progress.step("building onnx m-fp32") as build:
        build.started -= 42
        tick()
    assert shown == ["paritygate: building onnx m-fp32, 42 s\n"]


def test_plain_lines_wait_for_the_interval(shown, monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL_S", 10.0)
    with progress.step("quick"):
        tick()
    assert shown == []  # a step shorter than the interval prints nothing


def test_a_plain_line_starts_below_text_another_writer_left(monkeypatch):
    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    out, column = [], [len("test_parity.py ..")]
    previous = progress.configure(out.append, column=lambda: column[0])
    try:
        with progress.step("a"):
            tick()
            tick()  # pytest wrote nothing since: no second break
        assert out == ["\nparitygate: a, 0 s\n", "paritygate: a, 0 s\n"]
    finally:
        progress.close(previous)


def test_a_terminal_line_is_rewritten_and_cleared_back_to_pytest_line(monkeypatch):
    monkeypatch.setattr(progress, "TTY_TICK_S", 0.0)
    out = []
    previous = progress.configure(out.append, tty=True, column=lambda: 17)
    try:
        with progress.step("a"):
            tick()
            tick()
        assert out[0] == "\n"
        assert out[1].startswith("\rparitygate: a") and out[1].endswith("\x1b[K")
        assert out[2].startswith("\rparitygate: a")
        assert out[-1] == "\r\x1b[K\x1b[1A\x1b[17C"  # the cursor back where pytest left its line
    finally:
        progress.close(previous)


def test_nothing_is_written_without_a_stream():
    assert progress.BOARD.write is None  # this process's pytest runs under xdist or -q in the test command, or
    with progress.step("a") as a:        # shows through its own stream, which the fixture's configure replaced
        a.advance()
        tick()


def test_a_run_shows_progress_on_stdout_and_none_under_q(pytester, monkeypatch):
    """The plugin shows steps on pytest's stdout, through a copy of fd 1 that a test's capture does not swap; -q
    shows none."""
    pytester.makepyfile(test_slow="""
        import time
        from paritygate.common import progress

        def test_sleeps():
            with progress.step("sleeping"):
                time.sleep(2.5)
    """)
    monkeypatch.setenv("PARITYGATE_PROGRESS_S", "0.2")
    shown = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    shown.assert_outcomes(passed=1)
    assert any(line.startswith("paritygate: sleeping, ") for line in shown.outlines), shown.outlines
    quiet = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    quiet.assert_outcomes(passed=1)
    assert not any("paritygate: sleeping" in line for line in quiet.outlines), quiet.outlines
