"""The one JSON schema of bench/compare's results, with its reader and writer.

Every runner here (allreduce_compare.py, which run_compare.sh calls;
exchange_compare.py; torch_backends.py) writes, and every reader
(merge_results.py, aggregate_runs.py, plot_results.py) reads, one JSON object:

    {
      "schema": "collie-bench-compare/1",
      "records": [RECORD, ...],
      ...            optional sections of a runner's own (torch_backends.py:
                     "overhead", "ddp", "ddp_cpu_ms", "fsdp" and their settings)
    }

A RECORD is one configuration measured in one sitting, `reps` times:

    impl        who ran it: "collie", "gloo", "openmpi", "torch-gloo" (the
                torch of --torch-python), "torch-gloo-2.11", "torch-gloo-2.15",
                "deepspeed" (its CPU shm all_reduce), "torch-collie" (collie
                under torch.distributed)
    transport   "auto" (collie's default: shared memory on one host), "shm"
                (Open MPI: btl vader, its default coll components; DeepSpeed's
                shm op), "shm-tuned", "shm-han", "shm-collsm" (Open MPI: btl
                vader with only that coll component in front), or "tcp"
    collective  "all_reduce" (float32 sum), "broadcast" (root 0), "reduce"
                (sum to root 0), "all_gather", "reduce_scatter", "gather",
                "scatter" (root 0), "all_to_all" (equal parts),
                "all_to_all_uneven" (a router's skewed split sizes,
                peer_sweep.h's router_splits), "pingpong" (send/recv between
                ranks 0 and 1, one way) or "stream" (rank 0 sends back to back
                to rank 1: time per message)
    nranks      the world size; every rank on this host (bench/multihost:
                machine.hosts namespaces of machine.ranks_per_host)
    bytes       all_reduce, broadcast, reduce: each rank's buffer; the
                all_to_alls: each rank's whole input buffer; all_gather,
                reduce_scatter, gather, scatter: the whole gathered /
                scattered buffer; pingpong, stream: one message
    reps        how many times it was run: len(time_us)
    time_us     one per rep: the mean time per call of `iters` timed calls
                after `warmup` (averaged over the ranks where the runner does)
    busbw_gbps  one per rep: nccl-tests' bus bandwidth in GB/s, from the time
                (all_reduce: bytes / time * 2 (N-1) / N; the all_to_alls,
                all_gather, reduce_scatter, gather, scatter: bytes / time *
                (N-1) / N; broadcast, reduce: bytes / time); [] for pingpong
                and stream
    iters, warmup
    machine     the sitting: host, cpu, cores, kernel, start and end (UTC),
                load_before, load_after, and where measured tcp_stream_gbps
                and memcpy_gbps (lists, one per rep: T, one loopback TCP
                stream, and the memcpy rate)
    command     the command line of the first rep (rank 0's where a runner
                starts one process per rank)

Records with the same impl, transport, collective, nranks and bytes from
several files are one configuration (`key`); `merge` joins their samples.
The runners' helpers are here too: run_command, parse_rows (the peers'
"BYTES TIME_US ..." lines), collie_bench_rows (collie-bench --json) and
record_rows. Standard library only; imported, not run.
"""
from __future__ import annotations

import datetime
import json
import os
import shlex
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

from bench_stats import median

SCHEMA = "collie-bench-compare/1"

# Display names, in the order tables and plots list them.
LABELS = {
    ("collie", "auto"): "collie",
    ("collie", "shm"): "collie shm",
    ("collie", "tcp"): "collie TCP",
    ("torch-collie", "auto"): "torch collie",
    ("openmpi", "shm"): "Open MPI shm",
    ("openmpi", "shm-tuned"): "Open MPI shm tuned",
    ("openmpi", "shm-han"): "Open MPI shm han",
    ("openmpi", "shm-collsm"): "Open MPI shm coll/sm",
    ("openmpi", "tcp"): "Open MPI TCP",
    ("gloo", "tcp"): "Gloo ring",
    ("torch-gloo", "tcp"): "torch gloo",
    ("torch-gloo-2.11", "tcp"): "torch 2.11 gloo",
    ("torch-gloo-2.15", "tcp"): "torch 2.15 gloo",
    ("deepspeed", "shm"): "DeepSpeed shm",
}

TITLES = {  # and the order of the tables and plots
    "all_reduce": "all_reduce, float32 sum",
    "broadcast": "broadcast from rank 0",
    "reduce": "reduce to rank 0, float32 sum",
    "all_gather": "all_gather (the whole gathered buffer)",
    "reduce_scatter": "reduce_scatter, float32 sum (the whole scattered buffer)",
    "gather": "gather to rank 0 (the whole gathered buffer)",
    "scatter": "scatter from rank 0 (the whole scattered buffer)",
    "all_to_all": "all_to_all (each rank's whole buffer, equal parts)",
    "all_to_all_uneven": "all_to_all, uneven router splits (each rank's whole buffer)",
    "pingpong": "send/recv ping-pong, one way",
    "stream": "send/recv one-way stream, per message",
}


@dataclass
class Record:
    impl: str
    transport: str
    collective: str
    nranks: int
    bytes: int
    time_us: list = field(default_factory=list)
    busbw_gbps: list = field(default_factory=list)
    iters: int = 0
    warmup: int = 0
    machine: dict = field(default_factory=dict)
    command: str = ""

    @property
    def reps(self) -> int:
        return len(self.time_us)

    @property
    def key(self) -> tuple:
        return (self.impl, self.transport, self.collective, self.nranks, self.bytes)

    @property
    def label(self) -> str:
        return label(self.impl, self.transport)

    @property
    def is_collie(self) -> bool:
        return self.impl in ("collie", "torch-collie")

    def add(self, time_us: float) -> None:
        """One more rep; busbw follows from the time where it is defined."""
        self.time_us.append(time_us)
        bw = busbw_gbps(self.collective, self.nranks, self.bytes, time_us)
        if bw is not None:
            self.busbw_gbps.append(float(f"{bw:.6g}"))

    def to_json(self) -> dict:
        """The record as the schema orders its fields."""
        d = asdict(self)
        head = {k: d.pop(k) for k in ("impl", "transport", "collective", "nranks", "bytes")}
        return {**head, "reps": self.reps, **d}


def label(impl: str, transport: str) -> str:
    return LABELS.get((impl, transport), f"{impl} {transport}")


def label_order(labels: Iterable[str]) -> list:
    """The labels present, known ones first in LABELS' order."""
    labels = set(labels)
    known = [x for x in LABELS.values() if x in labels]
    return known + sorted(labels - set(known))


def busbw_gbps(collective: str, nranks: int, nbytes: int, time_us: float) -> Optional[float]:
    """nccl-tests' bus bandwidth (GB/s); None where the collective has none here."""
    if time_us <= 0:
        return None
    algbw = nbytes / (time_us * 1e3)
    if collective == "all_reduce":
        return algbw * 2 * (nranks - 1) / nranks
    if collective in ("all_to_all", "all_to_all_uneven", "all_gather", "reduce_scatter", "gather",
                      "scatter"):
        return algbw * (nranks - 1) / nranks
    if collective in ("broadcast", "reduce"):
        return algbw
    return None


def from_json(d: dict) -> Record:
    names = Record.__dataclass_fields__
    return Record(**{k: v for k, v in d.items() if k in names})


def save(path: str, records: Iterable[Record], extra: Optional[dict] = None) -> None:
    """Writes a results file: one record per line, so that diffs stay readable."""
    body = [f' "schema": {json.dumps(SCHEMA)}']
    for k, v in (extra or {}).items():
        body.append(f" {json.dumps(k)}: {json.dumps(v)}")
    lines = ",\n".join("  " + json.dumps(r.to_json()) for r in records)
    body.append(' "records": [\n' + lines + "\n ]")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(body) + "\n}\n")


def load(path: str) -> tuple[list, dict]:
    """(records, the file's other sections) of a results file, or of a run
    directory's results.json."""
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    with open(path) as f:
        d = json.load(f)
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} results file")
    extra = {k: v for k, v in d.items() if k not in ("schema", "records")}
    return [from_json(r) for r in d["records"]], extra


def merge(groups: Iterable[Iterable[Record]]) -> list:
    """One record per configuration: the samples of every sitting joined, in
    order; machine and command are the first sitting's."""
    merged: dict = {}
    for records in groups:
        for r in records:
            if r.key not in merged:
                merged[r.key] = from_json(r.to_json())  # a copy
            else:
                m = merged[r.key]
                m.time_us += r.time_us
                m.busbw_gbps += r.busbw_gbps
    return list(merged.values())


def by_table(records: Iterable[Record]) -> dict:
    """{(collective, nranks): {label: {bytes: record}}}, in a stable order."""
    tables: dict = {}
    for r in sorted(records, key=lambda r: (list(TITLES).index(r.collective)
                                            if r.collective in TITLES else 99, r.nranks)):
        tables.setdefault((r.collective, r.nranks), {}).setdefault(r.label, {})[r.bytes] = r
    return tables


def machines(records: Iterable[Record]) -> list:
    """The distinct sittings (machine objects) of the records, in order."""
    seen: dict = {}
    for r in records:
        seen.setdefault(json.dumps(r.machine, sort_keys=True), r.machine)
    return [m for m in seen.values() if m]


def t_stream(records: Iterable[Record]) -> Optional[float]:
    """The median T (one loopback TCP stream, GB/s) over the sittings' reps."""
    ts = [t for m in machines(records) for t in m.get("tcp_stream_gbps", [])]
    return median(ts) if ts else None


def machine_info() -> dict:
    """This machine and the moment; the runner adds load_after, end and the
    per-rep T and memcpy rates."""
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count(),
            "kernel": os.uname().release, "start": now(), "load_before": loadavg()}


def finish_machine(machine: dict) -> None:
    machine["end"] = now()
    machine["load_after"] = loadavg()


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def describe_machine(m: dict) -> str:
    """One line for a table's caption."""
    if not m:
        return ""
    text = (f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, kernel {m.get('kernel', '?')}, "
            f"{m.get('start', '?')} to {m.get('end', '?')}, load {m.get('load_before', '?')} "
            f"before, {m.get('load_after', '?')} after")
    return text


def why_missing(bin_dir: str, program: str = "", mpirun: bool = False,
                torch_python: str = "") -> str:
    """Why a runner cannot start here ("" when it can): its program not built
    in bin_dir, no mpirun on PATH, or no torch in torch_python."""
    if program and not os.access(f"{bin_dir}/{program}", os.X_OK):
        return f"{bin_dir}/{program} not built"
    if mpirun and subprocess.run(["sh", "-c", "command -v mpirun"],
                                 capture_output=True).returncode != 0:
        return "no mpirun"
    probe = [torch_python, "-c", "import torch.distributed"]
    if torch_python and subprocess.run(probe, capture_output=True).returncode != 0:
        return f"no torch in {torch_python}"
    return ""


def run_command(cmd: list, timeout: float, env: Optional[dict] = None) -> str:
    """Runs one command; its stdout, or RuntimeError with both outputs."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def parse_rows(text: str) -> dict:
    """{bytes: time_us} from the lines "BYTES TIME_US ..." that the peers'
    programs (gloo_collectives, mpi_collectives, mpi_exchange, torch_collectives.py) print."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 2 and cells[0].isdigit():
            rows[int(cells[0])] = float(cells[1])
    return rows


def parse_collective_rows(text: str) -> dict:
    """{collective: {bytes: time_us}} from the peers' lines "BYTES TIME_US
    ALGBW BUSBW COLLECTIVE" (the programs that take a list of collectives)."""
    rows: dict = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0].isdigit():
            rows.setdefault(cells[4], {})[int(cells[0])] = float(cells[1])
    return rows


def collie_bench_rows(json_path: str) -> dict:
    """{bytes: time_us} from collie-bench --json."""
    with open(json_path) as f:
        return {int(r["bytes"]): float(r["time_us"]) for r in json.load(f)["results"]}


def record_rows(records: dict, rows: dict, impl: str, transport: str, collective: str,
                nranks: int, iters: int, warmup: int, command: list) -> None:
    """Adds one rep's {bytes: time_us} to records ({key: Record}), making the
    records on the first rep."""
    for nbytes, t in sorted(rows.items()):
        r = Record(impl, transport, collective, nranks, nbytes, iters=iters, warmup=warmup,
                   command=shlex.join(command))
        records.setdefault(r.key, r).add(t)
