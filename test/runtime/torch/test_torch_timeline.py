"""collie's timeline from torch programs (collie_torch.timeline,
COLLIE_TRACE): one Chrome trace / Perfetto JSON file per job, with every
collective collie ran inside the program's step spans, from every rank."""
import json
import os
import textwrap

import pytest

import harness
from harness import assert_ok


def spans_by_rank(trace):
    named, spans = set(), {}
    for e in trace["traceEvents"]:
        if e["ph"] == "M":
            if e["name"] == "process_name":
                assert e["args"]["name"] == f"rank {e['pid']}"
                named.add(e["pid"])
            continue
        assert e["ph"] == "X", e
        spans.setdefault(e["pid"], []).append(e)
    return named, spans


def inside(inner, outer, slack_us=20.0):
    return (inner["ts"] >= outer["ts"] - slack_us
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + slack_us)


def ended_inside(call, outer, slack_us=20.0):
    """A collective's times come from the flight recorder's counter,
    converted to CLOCK_REALTIME when it completes: its end is exact, its
    start off by the counter's rate error times its duration."""
    end = call["ts"] + call["dur"]
    return outer["ts"] <= end <= outer["ts"] + outer["dur"] + slack_us


def test_torch_ddp_trace(tmp_path):
    """samples/torch_ddp --trace, 2 ranks: DDP's bucket all_reduces (collie's
    collectives) lie inside the backward of each step, on every rank."""
    data = "/usr/share/datasets/fashion-mnist"
    if not os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")):
        pytest.skip(f"no Fashion-MNIST in {data} (package dataset-fashion-mnist, installed by tools/collie.sh)")
    trace_path = tmp_path / "trace.json"
    script = os.path.join(harness.SOURCE_DIR, "samples", "torch_ddp", "train.py")
    results = harness.collect(harness.spawn_ranks(
        2, ["--epochs", "1", "--max-steps", "4", "--print-freq", "1000", "--output-dir",
            str(tmp_path / "out"), "--timeout", "120", "--trace", str(trace_path)],
        init="env", script=script))
    assert_ok(results)
    assert f"timeline written to {trace_path}" in results[0].out, results[0].out
    trace = json.loads(trace_path.read_text())  # the whole file is JSON
    named, spans = spans_by_rank(trace)
    assert named == {0, 1}
    for rank in (0, 1):
        steps = [e for e in spans[rank] if e["cat"] == "step"]
        backwards = [e for e in spans[rank] if e["name"] == "backward"]
        all_reduces = [e for e in spans[rank]
                       if e["cat"] == "collective" and e["name"] == "all_reduce"]
        assert len(steps) == 4 and len(backwards) == 4, spans[rank]
        for step, backward in zip(steps, backwards):
            assert inside(backward, step)
            # The MLP's gradients are one bucket: one all_reduce per backward.
            held = [a for a in all_reduces if ended_inside(a, backward)]
            assert len(held) == 1, (step, all_reduces)
            assert held[0]["args"]["group"] == "0"
            assert held[0]["args"]["bytes"] > 0
    ranks = trace["otherData"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert ranks[1]["rtt_begin_ns"] > 0
    assert trace["otherData"]["missing_ranks"] == []


SCRIPT = textwrap.dedent("""
    import torch, torch.distributed as dist
    import collie_torch.timeline as timeline
    dist.init_process_group("collie")
    t = torch.ones(8)
    for step in range(3):
        with timeline.step_span(f"step {step}", step=step):
            dist.all_reduce(t)
    print("recording", timeline.enabled())
    # No finish(), no destroy_process_group(): the timeline is written at exit.
""")


def test_collie_trace_env_writes_at_exit(tmp_path):
    """COLLIE_TRACE=FILE in a program that never mentions the timeline but
    its step spans: started with the default group, written at exit."""
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    trace_path = tmp_path / "env.json"
    results = harness.collect(harness.spawn_ranks(
        3, [], env={"COLLIE_TRACE": str(trace_path)}, init="env", script=str(script)))
    assert_ok(results)
    assert all("recording True" in r.out for r in results), harness.report(results)
    named, spans = spans_by_rank(json.loads(trace_path.read_text()))
    assert named == {0, 1, 2}
    for rank in range(3):
        steps = [e for e in spans[rank] if e["cat"] == "step"]
        assert [s["args"]["step"] for s in steps] == [0, 1, 2]
        for s in steps:
            calls = [e for e in spans[rank]
                     if e["cat"] == "collective" and ended_inside(e, s, slack_us=0)]
            assert [c["name"] for c in calls] == ["all_reduce"], spans[rank]
            assert calls[0]["args"]["bytes"] == 32
