"""The flight recorder under torch: every rank's dump lands at
<TORCH_FR_DUMP_TEMP_FILE><rank>, written by torch's own recorder (torch
2.15, whose FlightRecorderHook collie feeds through its completion and
abort hooks) or by collie's (torch 2.11), and torch 2.15's analyser
(torchfrtrace) reads either: a hang names the collective and the rank that
never joined it. workers_flight_recorder.py holds what each rank does.

torch 2.11's own torchfrtrace asserts on profiling names that are not
NCCL's, so the analyser is always torch 2.15's: COLLIE_TORCHFRTRACE (ctest
passes the newest environment's), else the one next to this Python, else
the 2.15 environment beside this one.
"""
import os
import pickle
import subprocess
import sys

import pytest
import torch

import harness
from harness import assert_ok

WORKERS = os.path.join(harness.HERE, "workers_flight_recorder.py")
WORLD = 4
PREFIX = "collie_rank_"
# torch 2.15 and later record a hooked backend's calls themselves.
TORCH_HAS_HOOKS = hasattr(torch._C._distributed_c10d, "FlightRecorderHook")


def torchfrtrace():
    bin_dir = os.path.dirname(sys.executable)
    candidates = [os.environ.get("COLLIE_TORCHFRTRACE", ""),
                  os.path.join(bin_dir, "torchfrtrace") if TORCH_HAS_HOOKS else "",
                  os.path.join(os.path.dirname(os.path.dirname(bin_dir)), "venv-torch-2.15.0",
                               "bin", "torchfrtrace")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("no torch 2.15 torchfrtrace (tools/collie.sh makes venv-torch-2.15.0)")


# Whose recorder writes the dumps: torch's where it has one (2.15), or
# collie's (2.11; under 2.15 when torch's is off and collie's is not).
RECORDERS = {"default": {},
             "collie": {"TORCH_FR_BUFFER_SIZE": "0", "COLLIE_FR_BUFFER_SIZE": "2000"}}


def run(scenario, folder, recorder="default"):
    # collie's recorder times calls (duration_ms) when asked, as torch's NCCL
    # does; torch's hook has the durations collie's completion hooks report.
    env = dict(RECORDERS[recorder], TORCH_FR_DUMP_TEMP_FILE=os.path.join(folder, PREFIX),
               COLLIE_FR_ENABLE_TIMING="1")
    results = harness.collect(harness.spawn_ranks(WORLD, [scenario], env=env, init="env",
                                                  script=WORKERS))
    assert_ok(results)
    return results


def dumps(folder):
    out = {}
    for r in range(WORLD):
        with open(os.path.join(folder, f"{PREFIX}{r}"), "rb") as f:
            out[r] = pickle.load(f)
    files = sorted(f for f in os.listdir(folder) if not f.startswith("."))
    assert files == sorted(f"{PREFIX}{r}" for r in range(WORLD)), files  # one file per rank
    return out


def analyse(analyser, folder):
    p = subprocess.run([analyser, folder, "--prefix", PREFIX], capture_output=True, text=True,
                       timeout=120)
    text = p.stdout + p.stderr
    print(text)
    assert p.returncode == 0, text
    return text


def entries_of(dump, pg_name):
    return [e for e in dump["entries"] if e["process_group"][0] == pg_name]


def check_groups(dump):
    """torch's group names and descriptions, and the members' global ranks."""
    config = dump["pg_config"]
    assert config["0"]["desc"] == "default_pg", config
    assert config["0"]["ranks"] == str(list(range(WORLD))), config
    assert config["1"]["desc"] == "side", config
    assert config["1"]["ranks"] == str(list(range(WORLD))), config


def check_written_by(dump, recorder="default"):
    """Under torch 2.15 torch's recorder wrote the dump (its entries name the
    recording thread; collie's do not), else collie's."""
    entry = dump["entries"][0]
    torch_wrote = TORCH_HAS_HOOKS and recorder == "default"
    assert ("thread_name" in entry) == torch_wrote, sorted(entry)


@pytest.mark.parametrize("recorder", ["default", "collie"])
def test_hang_names_the_missing_rank(tmp_path, recorder):
    """Rank 2 skips the 3rd all_reduce: every rank dumps (the three that time
    out, and rank 2 on their request), the analyser names rank 2 and the
    all_reduce, and the dumps tell the finished calls from the hung one."""
    analyser = torchfrtrace()
    folder = str(tmp_path)
    run("hang", folder, recorder)
    d = dumps(folder)
    for r in range(WORLD):
        check_groups(d[r])
        check_written_by(d[r], recorder)
        world = entries_of(d[r], "0")
        assert [e["collective_seq_id"] for e in world[:2]] == [1, 2], world
        for e in world[:2]:
            assert e["profiling_name"] == "collie:all_reduce", e
            assert e["state"] == "completed", e
            assert e["duration_ms"] is not None and e["duration_ms"] >= 0, e
            assert e["time_discovered_completed_ns"], e
        if r == 2:
            assert len(world) == 2, world  # it skipped the 3rd
        else:
            hung = world[2]
            assert hung["collective_seq_id"] == 3 and hung["profiling_name"] == "collie:all_reduce"
            assert hung["state"] != "completed", hung
            assert hung.get("duration_ms") is None, hung
    text = analyse(analyser, folder)
    assert "Not all ranks joining collective" in text, text
    assert "missing ranks: {2}" in text, text
    assert "collie:all_reduce" in text, text


def test_on_demand_dump_every_call_completed(tmp_path):
    """collie_torch.dump_flight_recorder() on every rank: collectives of two
    groups, an asynchronous one, and a batch_isend_irecv (coalesced: its
    Works complete with the batch), all completed with a duration."""
    analyser = torchfrtrace()
    folder = str(tmp_path)
    run("on_demand", folder)
    d = dumps(folder)
    for r in range(WORLD):
        check_groups(d[r])
        check_written_by(d[r])
        names = [e["profiling_name"] for e in d[r]["entries"]]
        assert "collie:all_reduce" in names and "collie:broadcast" in names, names
        # batch_isend_irecv: torch's recorder has each send and recv,
        # collie's the batch ("collie:coalesced").
        if TORCH_HAS_HOOKS:
            assert any(n.startswith("collie:send") for n in names), names
            assert any(n.startswith("collie:recv") for n in names), names
        else:
            assert "collie:coalesced" in names, names
        for e in d[r]["entries"]:
            if e["profiling_name"] == "collie:barrier" and e is d[r]["entries"][-1]:
                continue  # the last call may still be in flight
            assert e["state"] == "completed", e
            assert e["duration_ms"] is not None, e
    text = analyse(analyser, folder)
    assert "Not all ranks joining" not in text, text
