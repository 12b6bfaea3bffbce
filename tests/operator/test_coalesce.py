"""Triggers that arrive while a pass for the same key runs fold into one more pass."""

import threading

from llmop.operator.reconcile.coalesce import Coalescer


def test_a_burst_during_a_run_makes_one_more_run_and_other_keys_run_at_once():
    c = Coalescer()
    started, release, runs = threading.Event(), threading.Event(), []

    def slow():
        runs.append("a")
        started.set()
        release.wait(10)
        return len(runs)

    first = threading.Thread(target=lambda: runs.append(("result", c.run("a", slow))))
    first.start()
    assert started.wait(10)
    assert [c.run("a", slow) for _ in range(5)] == [None] * 5  # folded, not run
    assert c.run("b", lambda: "b ran") == "b ran"  # another key is not held up
    release.set()
    first.join(10)
    assert runs.count("a") == 2 and ("result", 2) in runs  # one more run, whose result the first caller gets


def test_an_error_releases_the_key():
    c = Coalescer()

    def boom():
        raise RuntimeError("x")

    for _ in range(2):
        try:
            c.run("k", boom)
        except RuntimeError:
            pass
    assert c.run("k", lambda: 1) == 1
