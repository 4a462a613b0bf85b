#!/usr/bin/env python3
"""collie against Gloo, Open MPI and torch's gloo across emulated hosts.

Builds HOSTS network namespaces ("hosts", each with its own UTS host name)
on one bridge in a switch namespace, each host joined by a veth pair whose
two ends are shaped with `tc tbf` to the link rate (so each host can send and
receive at most RATE), and PER_HOST ranks in each. This machine's CPUs are
dealt out among the hosts (taskset, the same for every library: on 2 cores,
hosts 0 and 2 share CPU 0), so that each rank sees the cores its host has.
For every link rate in --rates, --reps times, it measures one TCP stream
between two hosts (the link as TCP sees it) and every host streaming to the
next at once (what the cores carry through all links together: the roof
where the machine, not the link, is the limit), then times, each library
in turn:

    collie      collie-bench --blocking, one process per rank (its default
                across hosts: shared memory inside a host, TCP between hosts,
                the hierarchical algorithms)
    Gloo ring   bench/compare/gloo_collectives ring: all_reduce (ring),
                broadcast, all_gather (Gloo has one algorithm for these two)
    Gloo HD     gloo_collectives hd: all_reduce and reduce_scatter halving-doubling
    Open MPI    bench/compare/mpi_collectives under mpirun started in host 0,
                its daemons started in the other hosts through an rsh agent
                (`ip netns exec`); btl self,vader,tcp: shared memory inside a
                host, TCP between hosts; mpi_yield_when_idle 1, as on any
                node with more ranks than cores
    torch gloo  bench/compare/torch_collectives.py, GLOO_SOCKET_IFNAME=eth0

all_reduce from --min to --max (x4), broadcast, all_gather and reduce_scatter
from --other-min to --other-max (x16); float32, sum where they reduce; sizes as
nccl-tests counts them. At most --iters timed calls per size (after at most
--warmup), fewer above --iter-bytes / size. Writes, into OUT:

    <rate>/results.json   the records (bench/compare/bench_results.py's schema;
                          the machine object holds the link rate and the
                          measured TCP streams per rep)
    results.md            the tables (time per call, busbw / link rate and /
                          roof; multihost_report.py)
    multihost.svg         busbw / link rate and time per call, per rate

Needs root (ip netns, tc). The namespaces and their links are removed at
the end, also on an error or Ctrl-C.

    bench/multihost/multihost_compare.py --build build --out out/multihost
    bench/multihost/multihost_compare.py --build build --out /tmp/mh --rates 1gbit \\
        --reps 1 --max 1M --other-max 64K --libs collie gloo_ring
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARE = os.path.join(os.path.dirname(HERE), "compare")
sys.path.insert(0, COMPARE)
import bench_results  # noqa: E402
import multihost_report  # noqa: E402  (beside this file; it names the libraries' labels)
from bench_stats import parse_bytes  # noqa: E402
from multihost_report import parse_rate  # noqa: E402

ALL_REDUCE = ["all_reduce"]
OTHERS = ["broadcast", "all_gather", "reduce_scatter"]
# library -> (impl, transport) of its records, and the collectives it runs
LIBS = {
    "collie": (("collie", "auto"), ALL_REDUCE + OTHERS),
    "gloo_ring": (("gloo", "tcp"), ALL_REDUCE + ["broadcast", "all_gather"]),
    "gloo_hd": (("gloo-hd", "tcp"), ALL_REDUCE + ["reduce_scatter"]),
    "mpi": (("openmpi", "vader+tcp"), ALL_REDUCE + OTHERS),
    "torch": (("torch-gloo", "tcp"), ALL_REDUCE + OTHERS),
}


def note(text: str) -> None:
    print(f"multihost: {text}", file=sys.stderr, flush=True)


def sh(*cmd: str, ns: str | None = None) -> str:
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(argv)} exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


class Lan:
    """HOSTS namespaces on one bridge; each host's link shaped to a rate."""

    def __init__(self, hosts: int, subnet: str):
        tag = f"cmh{os.getpid() % 100000}"
        self.switch = f"{tag}sw"
        self.hosts = [f"{tag}h{k}" for k in range(hosts)]
        self.names = [f"node{k}" for k in range(hosts)]  # UTS host names
        self.subnet = subnet

    def addr(self, k: int) -> str:
        return f"{self.subnet}.{k + 1}"

    def up(self) -> None:
        sh("ip", "netns", "add", self.switch)
        sh("ip", "link", "add", "br0", "type", "bridge", ns=self.switch)
        sh("ip", "link", "set", "br0", "up", ns=self.switch)
        for k, ns in enumerate(self.hosts):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", f"{ns}e", "type", "veth", "peer", "name", f"{ns}p")
            sh("ip", "link", "set", f"{ns}e", "netns", ns)
            sh("ip", "link", "set", f"{ns}p", "netns", self.switch)
            sh("ip", "link", "set", f"{ns}e", "name", "eth0", ns=ns)
            sh("ip", "addr", "add", f"{self.addr(k)}/24", "dev", "eth0", ns=ns)
            for dev in ("lo", "eth0"):
                sh("ip", "link", "set", dev, "up", ns=ns)
            sh("ip", "link", "set", f"{ns}p", "master", "br0", ns=self.switch)
            sh("ip", "link", "set", f"{ns}p", "up", ns=self.switch)

    def shape(self, rate: str) -> None:
        """tbf on both ends of every host's link: RATE out of and into each
        host. The bucket holds 100 us of the rate, at least 128 KiB (a GSO
        packet must fit); the queue 10 ms."""
        bits = parse_rate(rate)
        burst = max(128 << 10, int(bits / 8 * 100e-6))
        for ns in self.hosts:
            for where, dev in ((ns, "eth0"), (self.switch, f"{ns}p")):
                sh("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                   "burst", str(burst), "latency", "10ms", ns=where)

    def down(self) -> None:
        for ns in self.hosts + [self.switch]:
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def prefix(self, k: int) -> list:
        """The argv prefix that runs a command on host k, under its host name."""
        return ["ip", "netns", "exec", self.hosts[k], "unshare", "--uts", "taskset", "-c",
                self.cpus(k), "sh", "-c", f'hostname {self.names[k]} && exec "$@"', "sh"]

    def cpus(self, k: int) -> str:
        """Host k's CPUs: this machine's CPUs dealt out among the hosts (on 2
        cores, 4 hosts: hosts 0 and 2 on CPU 0, 1 and 3 on CPU 1), the same
        for every library, so that each sees the cores its host has."""
        cpus = sorted(os.sched_getaffinity(0))
        per = max(1, len(cpus) // len(self.hosts))
        if len(cpus) >= len(self.hosts):
            return ",".join(str(c) for c in cpus[k * per:(k + 1) * per])
        return str(cpus[k % len(cpus)])


STREAM_SERVER = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 0)); s.listen(1)
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); n = 0; start = None
buf = bytearray(1 << 20)
while True:
    k = c.recv_into(buf)
    if not k: break
    if start is None: start = time.perf_counter()
    n += k
print(n * 8 / (time.perf_counter() - start) / 1e9, flush=True)
"""

STREAM_CLIENT = r"""
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = bytes(1 << 20); end = time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end: c.sendall(buf)
c.close()
"""


def link_stream(lan: Lan, seconds: float = 2.0) -> float:
    """One TCP stream from host 1 to host 0 for `seconds`: Gbit/s."""
    server = subprocess.Popen(lan.prefix(0) + [sys.executable, "-c", STREAM_SERVER, lan.addr(0)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        sh(*lan.prefix(1), sys.executable, "-c", STREAM_CLIENT, lan.addr(0), port, str(seconds))
        out, _ = server.communicate(timeout=60)
        return float(out.strip())
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def ring_stream(lan: Lan, seconds: float = 2.0) -> float:
    """Every host sending one TCP stream to the next at once (0 -> 1 -> ... ->
    0), as a bandwidth-optimal all_reduce does: the median per-host Gbit/s.
    What this machine's cores can push through all the links together: the
    roof where it is below the link rate."""
    hosts = len(lan.hosts)
    servers = [subprocess.Popen(lan.prefix(k) + [sys.executable, "-c", STREAM_SERVER,
                                                 lan.addr(k)], stdout=subprocess.PIPE, text=True)
               for k in range(hosts)]
    try:
        ports = [s.stdout.readline().strip() for s in servers]
        clients = [subprocess.Popen(lan.prefix(k) + [sys.executable, "-c", STREAM_CLIENT,
                                                     lan.addr((k + 1) % hosts),
                                                     ports[(k + 1) % hosts], str(seconds)])
                   for k in range(hosts)]
        for c in clients:
            if c.wait(timeout=60) != 0:
                raise RuntimeError(f"ring stream client exited {c.returncode}")
        rates = sorted(float(s.communicate(timeout=60)[0].strip()) for s in servers)
        return (rates[hosts // 2] + rates[(hosts - 1) // 2]) / 2
    finally:
        for s in servers:
            if s.poll() is None:
                s.kill()
                s.wait()


class Runner:
    def __init__(self, args: argparse.Namespace, lan: Lan, tmp: str):
        self.args, self.lan, self.tmp = args, lan, tmp
        self.world = args.hosts * args.per_host
        self.port = 29400
        self.runs = 0

    def sweep(self, collective: str) -> tuple:
        a = self.args
        if collective == "all_reduce":
            return a.min, a.max, 4
        return a.other_min, a.other_max, 16

    def host_of(self, rank: int) -> int:
        return rank // self.args.per_host

    def ranks(self, argv_of_rank, env_of_rank=None) -> tuple:
        """Starts every rank in its host; rank 0's stdout and argv."""
        self.runs += 1
        procs, logs = [], []
        for r in range(self.world):
            env = dict(os.environ)
            env.pop("COLLIE_HOST_ID", None)
            env.update(env_of_rank(r) if env_of_rank else {})
            log = open(os.path.join(self.tmp, f"run{self.runs}.rank{r}"), "w+")
            logs.append(log)
            procs.append(subprocess.Popen(self.lan.prefix(self.host_of(r)) + argv_of_rank(r),
                                          stdout=log, stderr=subprocess.STDOUT, env=env))
        try:
            deadline = time.monotonic() + self.args.timeout
            for r, p in enumerate(procs):
                if p.wait(timeout=max(1, deadline - time.monotonic())) != 0:
                    logs[r].seek(0)
                    raise RuntimeError(f"rank {r} ({shlex.join(p.args)}) exited {p.returncode}:\n"
                                       f"{logs[r].read()[-3000:]}")
            logs[0].seek(0)
            return logs[0].read(), argv_of_rank(0)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()

    def collie(self, collectives: list) -> dict:
        out = {}
        for c in collectives:
            lo, hi, factor = self.sweep(c)
            self.port += 1
            json_path = os.path.join(self.tmp, f"collie_{c}.json")
            a = self.args
            argv = [f"{a.bin}/collie-bench", "-C", c, "-b", str(lo), "-e", str(hi), "-f",
                    str(factor), "-n", str(a.iters), "-w", str(a.warmup), "--iter-bytes",
                    str(a.iter_bytes), "--blocking", "-c", "0", "--json", json_path]
            env = lambda r: {"RANK": str(r), "WORLD_SIZE": str(self.world),  # noqa: E731
                             "LOCAL_RANK": str(r % a.per_host),
                             "LOCAL_WORLD_SIZE": str(a.per_host),
                             "MASTER_ADDR": self.lan.addr(0), "MASTER_PORT": str(self.port)}
            _, cmd = self.ranks(lambda r: argv, env)
            out[c] = (bench_results.collie_bench_rows(json_path), cmd)
        return out

    def peer_args(self, collectives: list) -> list:
        """Runs of (collectives, sweep args) that share one sweep."""
        groups = {}
        for c in collectives:
            groups.setdefault(self.sweep(c), []).append(c)
        a = self.args
        return [(cs, [str(lo), str(hi), str(f), str(a.iters), str(a.warmup), str(a.iter_bytes)])
                for (lo, hi, f), cs in groups.items()]

    def gloo(self, algo: str, collectives: list) -> dict:
        out = {}
        for cs, sweep in self.peer_args(collectives):
            store = tempfile.mkdtemp(dir=self.tmp, prefix="gloo_store_")
            text, cmd = self.ranks(lambda r: [f"{self.args.bin}/gloo_collectives", str(r),
                                              str(self.world), store,
                                              self.lan.addr(self.host_of(r)), algo,
                                              ",".join(cs), *sweep])
            out.update(split_rows(text, cmd))
        return out

    def torch(self, collectives: list) -> dict:
        out = {}
        for cs, sweep in self.peer_args(collectives):
            init = os.path.join(tempfile.mkdtemp(dir=self.tmp, prefix="torch_"), "init")
            text, cmd = self.ranks(
                lambda r: [self.args.torch_python, f"{COMPARE}/torch_collectives.py", str(r),
                           str(self.world), init, ",".join(cs), *sweep],
                lambda r: {"GLOO_SOCKET_IFNAME": "eth0"})
            out.update(split_rows(text, cmd))
        return out

    def mpi(self, collectives: list) -> dict:
        agent = os.path.join(self.tmp, "netns_agent.sh")
        cases = "\n".join(f'  {self.lan.addr(k)}) k={k} ;;' for k in range(self.args.hosts))
        with open(agent, "w") as f:
            f.write("#!/bin/sh\n# mpirun's rsh agent: \"host\" $1 is a namespace.\n"
                    f'host=$1; shift\ncase "$host" in\n{cases}\n'
                    '  *) echo "netns_agent: unknown host $host" >&2; exit 1 ;;\nesac\n'
                    f'cpus=$(echo "{" ".join(self.lan.cpus(k) for k in range(self.args.hosts))}" | '
                    'cut -d" " -f$((k + 1)))\n'
                    f'exec ip netns exec {self.lan.hosts[0][:-1]}$k unshare --uts taskset -c '
                    '"$cpus" sh -c "hostname node$k && $*"\n')
        os.chmod(agent, 0o755)
        hosts = ",".join(f"{self.lan.addr(k)}:{self.args.per_host}"
                         for k in range(self.args.hosts))
        subnet = f"{self.lan.subnet}.0/24"
        out = {}
        for cs, sweep in self.peer_args(collectives):
            cmd = ["mpirun", "--allow-run-as-root", "-np", str(self.world), "--host", hosts,
                   "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
                   "--mca", "btl", "self,vader,tcp", "--mca", "btl_tcp_if_include", subnet,
                   "--mca", "oob_tcp_if_include", subnet, "--bind-to", "none",
                   "--mca", "mpi_yield_when_idle", "1",
                   f"{self.args.bin}/mpi_collectives", ",".join(cs), *sweep]
            p = subprocess.run(self.lan.prefix(0) + cmd, capture_output=True, text=True,
                               timeout=self.args.timeout)
            if p.returncode != 0:
                raise RuntimeError(f"{shlex.join(cmd)} exited {p.returncode}:\n{p.stdout}\n"
                                   f"{p.stderr[-3000:]}")
            out.update(split_rows(p.stdout, cmd))
        return out

    def run(self, lib: str) -> dict:
        collectives = LIBS[lib][1]
        if lib == "collie":
            return self.collie(collectives)
        if lib == "gloo_ring":
            return self.gloo("ring", collectives)
        if lib == "gloo_hd":
            return self.gloo("hd", collectives)
        if lib == "mpi":
            return self.mpi(collectives)
        return self.torch(collectives)


def split_rows(text: str, cmd: list) -> dict:
    """{collective: ({bytes: time_us}, cmd)} from "BYTES TIME_US ALGBW BUSBW COLLECTIVE" lines."""
    out: dict = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 5 and cells[0].isdigit():
            out.setdefault(cells[4], ({}, cmd))[0][int(cells[0])] = float(cells[1])
    return out


def missing(args: argparse.Namespace, lib: str) -> str:
    """Why the library cannot run here, or ""."""
    need = {"collie": "collie-bench", "gloo_ring": "gloo_collectives",
            "gloo_hd": "gloo_collectives", "mpi": "mpi_collectives"}
    return bench_results.why_missing(args.bin, need.get(lib, ""), mpirun=lib == "mpi",
                                     torch_python=args.torch_python if lib == "torch" else "")


def measure(args: argparse.Namespace, lan: Lan, libs: list) -> dict:
    """{rate: [Record]}; each rate's results.json kept up to date."""
    results = {}
    world = args.hosts * args.per_host
    for rate in args.rates:
        lan.shape(rate)
        machine = bench_results.machine_info()
        machine.update({"link": rate, "hosts": args.hosts, "ranks_per_host": args.per_host,
                        "link_stream_gbit": [], "ring_stream_gbit": []})
        records: dict = {}
        path = os.path.join(args.out, rate, "results.json")
        for rep in range(args.reps):
            machine["link_stream_gbit"].append(round(link_stream(lan), 3))
            machine["ring_stream_gbit"].append(round(ring_stream(lan), 3))
            note(f"{rate}, rep {rep + 1} of {args.reps}: one TCP stream across the link: "
                 f"{machine['link_stream_gbit'][-1]} Gbit/s; every host at once: "
                 f"{machine['ring_stream_gbit'][-1]} Gbit/s each")
            for lib in libs:
                note(f"{rate}, rep {rep + 1} of {args.reps}: {lib}")
                with tempfile.TemporaryDirectory(prefix="multihost_") as tmp:
                    rows = Runner(args, lan, tmp).run(lib)
                impl, transport = LIBS[lib][0]
                for collective, (times, cmd) in rows.items():
                    bench_results.record_rows(records, times, impl, transport, collective,
                                              world, args.iters, args.warmup, cmd)
                for r in records.values():
                    r.machine = machine
                bench_results.save(path, records.values())
        bench_results.finish_machine(machine)
        bench_results.save(path, records.values())
        results[rate] = list(records.values())
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--build", default="build", help="the build directory (its bin/)")
    ap.add_argument("--out", required=True, help="the output directory")
    ap.add_argument("--rates", nargs="+", default=["10gbit", "1gbit"], help="tc tbf rates")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--per-host", type=int, default=2, help="ranks per host")
    ap.add_argument("--subnet", default="10.231.40", help="the hosts' /24 (first 3 octets)")
    ap.add_argument("--min", type=parse_bytes, default=4, help="all_reduce's smallest size")
    ap.add_argument("--max", type=parse_bytes, default=256 << 20, help="all_reduce's largest")
    ap.add_argument("--other-min", type=parse_bytes, default=64,
                    help="broadcast, all_gather, reduce_scatter: smallest size")
    ap.add_argument("--other-max", type=parse_bytes, default=64 << 20, help="and largest")
    ap.add_argument("--iters", type=int, default=20, help="timed calls per size, at most")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up calls per size, at most")
    ap.add_argument("--iter-bytes", type=parse_bytes, default=64 << 20,
                    help="at most this many bytes of timed calls per size (at least one call)")
    ap.add_argument("--reps", type=int, default=5, help="times the whole set is run")
    ap.add_argument("--libs", nargs="+", default=list(LIBS), choices=list(LIBS))
    ap.add_argument("--torch-python", default=os.path.expanduser(
        "~/.cache/collie/venv-torch-2.11.0/bin/python"), help="the Python with torch 2.x")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per program run")
    args = ap.parse_args()
    args.bin = os.path.abspath(os.path.join(args.build, "bin"))
    if os.geteuid() != 0:
        sys.exit("multihost: needs root (ip netns, tc)")
    for rate in args.rates:  # refused before any namespace exists
        try:
            parse_rate(rate)
        except ValueError as e:
            sys.exit(f"multihost: {e}")
    if args.hosts < 2 or args.per_host < 1 or args.hosts > 200:
        sys.exit(f"multihost: --hosts {args.hosts} --per-host {args.per_host}: "
                 "expected 2-200 hosts of at least 1 rank")
    libs = []
    for lib in args.libs:
        why = missing(args, lib)
        if why:
            note(f"{why}; skipping {lib}")
        else:
            libs.append(lib)
    lan = Lan(args.hosts, args.subnet)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        lan.up()
        results = measure(args, lan, libs)
    finally:
        lan.down()
    text = multihost_report.render(results)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    note(f"plot: {multihost_report.plot(results, os.path.join(args.out, 'multihost.svg'))}")


if __name__ == "__main__":
    main()
