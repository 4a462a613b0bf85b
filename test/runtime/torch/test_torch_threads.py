"""Threads sharing one collie group (workers_threads.py holds what each rank
does): two threads calling at once are refused with an error naming both
calls, and neither call returns data; a thread that waits for another's
Works, and threads that take turns, still work."""
import json
import os

import harness
from harness import assert_ok, report

WORKERS = os.path.join(harness.HERE, "workers_threads.py")


def run(world, *args):
    return harness.collect(harness.spawn_ranks(world, list(args), init="env", script=WORKERS))


def test_two_threads_calling_at_once_are_refused():
    results = run(2, "two_threads")
    assert_ok(results)
    ranks = {}
    for r in results:
        lines = [line for line in r.out.splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, report(results)
        rank = json.loads(lines[0][len("RESULT "):])
        ranks[rank["rank"]] = rank
    threads = ranks[0]["threads"]
    tids = [t["tid"] for t in threads]
    # Neither call returned: the later one is refused, naming both calls and
    # both threads, and the earlier one (waiting for rank 1) fails with it
    # rather than report data that may be another call's.
    assert not any(t["ok"] for t in threads), report(results)
    named = [t for t in threads
             if "was called on thread" in (t["error"] or "") and "a blocking call" in t["error"]
             and all(f"thread {tid}" in t["error"] for tid in tids)
             and t["error"].count("allreduce") >= 2 and "new_group" in t["error"]]
    # (The earlier call may fail with its own error, or with the same one
    # once the calls met.)
    assert named, report(results)
    assert all(t["type"] == "DistBackendError" for t in threads), report(results)


def test_a_thread_waiting_for_anothers_works_and_threads_taking_turns():
    assert_ok(run(2, "waiter_thread", 200))


def test_collectives_inside_future_callbacks_and_the_powersgd_hook():
    assert_ok(run(2, "callback_collectives", 40))
