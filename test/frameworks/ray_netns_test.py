"""Ray Train across hosts: a Ray cluster of a head and 2 worker nodes, each
in its own network namespace on one bridge, runs a TorchTrainer job with
TorchConfig(backend="collie") on 6 ranks, 2 per node; then a rank is killed
mid-job.

    python3 ray_netns_test.py [--venv DIR] [--keep] [--kill worker|raylet ...]

Root only. The namespaces (collie-y<i><pid>, the bridge in collie-yh<pid>,
subnet 10.231.77.0/24: node i is 10.231.77.<i+1>) are like
test/support/netns_lan.h's. Each node runs `ray start` in its namespace
with its own --temp-dir (the namespaces share the file system, and Ray's
sockets and session folders under one temp dir would collide), its own
--node-ip-address, --num-cpus 4 and the resource collie_slot=2 (one per
rank: so 2 ranks per node), and GLOO_SOCKET_IFNAME naming its veth (gloo
takes the host name's address otherwise, 127.0.0.1 in every namespace;
collie needs nothing: it takes the address that routes to MASTER_ADDR).
Token authentication is on, with a token made for the cluster
(RAY_AUTH_TOKEN_PATH in the temp folder; ~/.ray is not touched). The head's
port is a free one found in its namespace. The driver (ray_netns_driver.py)
runs in the head's namespace.

Checks:
1. collie: the job finishes; every rank's default group is collie's, the
   ranks ran 2 per node on 3 nodes, collie saw 3 hosts and ran its
   hierarchical algorithms (its DEBUG line), every rank ends with the same
   weights bit for bit, they moved, and they match 6-rank data parallel SGD
   computed in one process (within 1e-5: the sums' order differs). The same
   ranks then train the model again over a gloo group
   (new_group(backend="gloo"), in the same job: a second job would cost a
   minute of worker start-up on a small machine): the same weights within
   1e-5.
2. A killed rank (--kill worker, the default): a long job on collie; once
   every rank has trained 3 steps one rank on the third node gets SIGKILL.
   The driver's fit() must raise within DETECT_LIMIT_S seconds, Ray's error
   having the dead rank's snippet (its actor died or its health check
   failed, at its node's address), and a surviving rank's DistBackendError
   (collie's error) naming the dead rank and its address; the driver exits,
   and no training worker is left in any namespace afterwards (no hang).
   The times are printed: when fit() raised, and when collie's first
   "communicator broken" line was logged, after the kill.
   --kill raylet: the same with the third node's raylet killed instead (Ray
   then takes that node's workers down), in a job of its own.

Everything is removed at the end, on failure too: every process in the
namespaces (by pid, from `ip netns pids`: not `ray stop`, which kills every
Ray process on the machine, other jobs' too), the namespaces, the temp
folder.

Exit codes for ctest: 0 passed, 1 failed, 77 skipped (not root, no `ip
netns`, no frameworks environment or no Ray in it; under CI=true a
failure).
"""
import argparse
import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from outcome import finish, skip

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VENV = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                            "collie", "venv-frameworks-2.11.0")
SUBNET = "10.231.77"
NODES = 3
PER_NODE = 2
WORKERS = NODES * PER_NODE
STEPS = 8
DETECT_LIMIT_S = 20.0   # a killed rank must fail the job within this
JOB_TIMEOUT_S = 240     # one driver run, start to end (a loaded 2-core machine: ~100 s)
LONG_JOB_S = 90         # the failure case's job, were nothing killed


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sh(args, check=True, **kw):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited with {p.returncode}: {p.stdout.strip()}")
    return p


class Lan:
    """NODES namespaces on one bridge that lives in a namespace of its own."""

    def __init__(self):
        tag = str(os.getpid() % 100000)
        self.hub = f"collie-yh{tag}"
        self.names = [f"collie-y{i}{tag}" for i in range(NODES)]
        self.addrs = [f"{SUBNET}.{i + 1}" for i in range(NODES)]
        self.ifnames = [f"cy{i}{tag}" for i in range(NODES)]
        self.made = []

    def setup(self):
        """Makes the namespaces (what was made is in self.made, for remove())."""
        tag = str(os.getpid() % 100000)
        br = f"by{tag}"
        self._add(self.hub)
        sh(["ip", "-n", self.hub, "link", "add", br, "type", "bridge"])
        sh(["ip", "-n", self.hub, "link", "set", br, "up"])
        for i, ns in enumerate(self.names):
            host_end, hub_end = f"cy{i}{tag}", f"hy{i}{tag}"
            self._add(ns)
            sh(["ip", "link", "add", host_end, "type", "veth", "peer", "name", hub_end])
            try:
                sh(["ip", "link", "set", host_end, "netns", ns])
                sh(["ip", "link", "set", hub_end, "netns", self.hub])
            except RuntimeError:
                # Still in this namespace: deleting the namespaces won't take it.
                sh(["ip", "link", "del", host_end], check=False)
                raise
            sh(["ip", "-n", self.hub, "link", "set", hub_end, "master", br])
            sh(["ip", "-n", self.hub, "link", "set", hub_end, "up"])
            sh(["ip", "-n", ns, "addr", "add", f"{self.addrs[i]}/24", "dev", host_end])
            sh(["ip", "-n", ns, "link", "set", host_end, "up"])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _add(self, ns):
        sh(["ip", "netns", "add", ns])
        self.made.append(ns)

    def exec_in(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    def pids(self, i):
        p = sh(["ip", "netns", "pids", self.names[i]], check=False)
        return [int(x) for x in p.stdout.split() if x.isdigit()] if p.returncode == 0 else []

    def kill_all(self, grace_s=5.0):
        """Every process in the namespaces: SIGTERM, then SIGKILL after
        grace_s; returns how many were still there for SIGKILL."""
        def alive():
            return [pid for i in range(len(self.names)) for pid in self.pids(i)
                    if self.names[i] in self.made]
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            pids = alive()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not alive():
                return 0 if sig == signal.SIGTERM else len(pids)
        left = alive()
        if left:
            log(f"WARNING: processes {left} survive SIGKILL in the namespaces")
        return len(left)

    def remove(self):
        for ns in reversed(self.made):
            sh(["ip", "netns", "del", ns], check=False)
        self.made = []


def ray_bin(venv):
    return os.path.join(venv, "bin", "ray")


def node_env(tmp, lan=None, i=0):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "RAY_ADDRESS", "RAY_TMPDIR", "RAY_AUTH_TOKEN")}
    # Token authentication with the cluster's own token: Ray 2.60 turns it on
    # for a head whenever ~/.ray/auth_token exists (any earlier ray.init()
    # on the machine writes one) but not for the nodes that join, which are
    # then refused ("InvalidAuthToken"); explicit on every node and the
    # driver, and a token of this cluster, not the user's.
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1",
               TMPDIR=tmp, RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=os.path.join(tmp, "auth_token"),
               # The driver prints every rank's lines (Ray folds equal ones).
               RAY_DEDUP_LOGS="0")
    if lan is not None:
        # gloo's address is the host name's, 127.0.0.1 in every namespace
        # here (one /etc/hosts): name its interface (collie needs no such
        # setting, it takes the address that routes to MASTER_ADDR). The
        # workers inherit it from their node's raylet.
        env["GLOO_SOCKET_IFNAME"] = lan.ifnames[i]
    return env


def free_port(lan, i, python):
    """A port nobody listens on in node i's namespace (the kernel's pick)."""
    p = sh(lan.exec_in(i) + [python, "-c",
           "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"])
    return int(p.stdout.split()[-1])


def start_cluster(lan, venv, tmp):
    python = os.path.join(venv, "bin", "python")
    port = free_port(lan, 0, python)
    head = f"{lan.addrs[0]}:{port}"
    common = ["--num-cpus", "4", "--resources", json.dumps({"collie_slot": PER_NODE}),
              "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"]
    t0 = time.monotonic()
    procs = []
    for i in range(NODES):
        temp = os.path.join(tmp, f"ray{i}")
        os.makedirs(temp)
        args = [ray_bin(venv), "start", "--node-ip-address", lan.addrs[i], "--temp-dir", temp]
        args += (["--head", "--port", str(port), "--include-dashboard=false"] if i == 0
                 else ["--address", head])
        out = open(os.path.join(tmp, f"ray-start-{i}.log"), "w")
        procs.append((subprocess.Popen(lan.exec_in(i) + args + common, stdout=out,
                                       stderr=subprocess.STDOUT, env=node_env(tmp, lan, i)),
                       out))
        if i == 0:  # the workers need the head's GCS
            rc = procs[0][0].wait(timeout=120)
            out.close()
            if rc != 0:
                raise RuntimeError(f"ray start --head in {lan.names[0]} exited with {rc}:\n"
                                   + open(out.name).read()[-3000:])
    for i, (p, out) in enumerate(procs[1:], 1):
        rc = p.wait(timeout=120)
        out.close()
        if rc != 0:
            raise RuntimeError(f"ray start --address {head} in {lan.names[i]} exited with {rc}:\n"
                               + open(out.name).read()[-3000:])
    # Every node registered with its slots: `ray status` shows the cluster's
    # resources (waits on the GCS's view, not on time).
    deadline = time.monotonic() + 60
    while True:
        st = sh(lan.exec_in(0) + [ray_bin(venv), "status", "--address", head], check=False,
                env=node_env(tmp))
        m = re.search(r"([\d.]+)\s+collie_slot", st.stdout)
        if m and float(m.group(1)) == NODES * PER_NODE:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster never showed {NODES * PER_NODE} collie_slot:\n"
                               + st.stdout[-3000:])
        time.sleep(0.5)
    log(f"Ray cluster up: head {head}, nodes {lan.addrs} ({time.monotonic() - t0:.1f} s)")
    return head


def run_driver(lan, venv, tmp, head, backend, extra, tag, timeout=JOB_TIMEOUT_S):
    python = os.path.join(venv, "bin", "python")
    logpath = os.path.join(tmp, f"driver-{tag}.log")
    argv = lan.exec_in(0) + [python, os.path.join(HERE, "ray_netns_driver.py"), "--address", head,
                             "--node-ip", lan.addrs[0], "--backend", backend,
                             "--workers", str(WORKERS), "--storage",
                             os.path.join(tmp, "results"), "--fr-prefix",
                             os.path.join(tmp, f"fr-{tag}-rank")] + extra
    out = open(logpath, "w")
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=node_env(tmp))
    return p, out, logpath


def wait_driver(p, out, logpath, timeout):
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        rc = None
    out.close()
    with open(logpath, errors="replace") as f:
        return rc, f.read()


def check_training(lan, venv, tmp, head, failures):
    import torch
    import common
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir)
    t0 = time.monotonic()
    p, out, logpath = run_driver(lan, venv, tmp, head, "collie",
                                 ["--steps", str(STEPS), "--out-dir", out_dir, "--gloo-too"],
                                 "train")
    rc, text = wait_driver(p, out, logpath, JOB_TIMEOUT_S)
    log(f"train: driver exited {rc} after {time.monotonic() - t0:.1f} s")
    if rc != 0:
        print(text[-8000:])
        failures.append(f"train: the job failed (driver exit {rc})")
        return
    ranks = []
    for r in range(WORKERS):
        path = os.path.join(out_dir, f"rank{r}.pt")
        if not os.path.exists(path):
            failures.append(f"train: rank {r} wrote no weights")
            continue
        ranks.append(torch.load(path))
    if len(ranks) != WORKERS:
        return
    info = [s["info"] for s in ranks]
    by_node = {}
    for i in info:
        by_node.setdefault(i["node_ip"], []).append(i["rank"])
    log(f"train: ranks by node {dict(sorted(by_node.items()))}; rank 0: {info[0]['steps']} "
        f"steps in {info[0]['seconds']:.3f} s")
    if sorted(by_node) != sorted(lan.addrs) or any(len(v) != PER_NODE for v in by_node.values()):
        failures.append(f"train: ranks by node {by_node}, not {PER_NODE} on each of {lan.addrs}")
    for i in info:
        if i["pg_backend"] != "collie":
            failures.append(f"train: rank {i['rank']}'s default group's CPU backend is "
                            f"{i['pg_backend']!r}, not collie")
        if i["steps"] != STEPS:
            failures.append(f"train: rank {i['rank']} ran {i['steps']} steps, not {STEPS}")
    ref = common.reference(STEPS, WORKERS)
    init = common.make_model().state_dict()
    for key, name in (("weights", "collie"), ("gloo_weights", "gloo")):
        w0 = ranks[0][key]
        for s in ranks[1:]:
            if not all(torch.equal(w0[k], s[key][k]) for k in w0):
                failures.append(f"train: {name}: rank {s['info']['rank']}'s weights differ from "
                                f"rank 0's by {common.max_diff(w0, s[key]):.3g}")
        if common.max_diff(w0, init) == 0:
            failures.append(f"train: {name}: the weights did not move")
        d = common.max_diff(w0, ref)
        log(f"train: {name}: every rank's weights equal; max |w - 6-rank data parallel SGD| = "
            f"{d:.3g}")
        if d > 1e-5:
            failures.append(f"train: {name}: weights differ from 6-rank data parallel SGD by "
                            f"{d:.3g}")
    d = common.max_diff(ranks[0]["weights"], ranks[0]["gloo_weights"])
    log(f"train: collie vs gloo: max diff {d:.3g}")
    if d > 1e-5:
        failures.append(f"train: collie's weights differ from gloo's by {d:.3g}")
    hier = re.findall(r"rank (\d+): (\d+) hosts, at most (\d+) ranks on one: "
                      r"hierarchical algorithms (\w+)", text)
    seen = {int(r) for r, hosts, most, on in hier
            if hosts == str(NODES) and most == str(PER_NODE) and on == "on"}
    log(f"train: collie's hierarchical algorithms on at ranks {sorted(seen)}")
    if seen != set(range(WORKERS)):
        failures.append(f"train: not every rank logged '{NODES} hosts, at most {PER_NODE} ranks "
                        f"on one: hierarchical algorithms on' (got {hier}; {logpath})")


def training_workers(lan):
    """(namespace index, pid, title) of every Ray Train worker process left."""
    left = []
    for i in range(NODES):
        for pid in lan.pids(i):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "RayTrainWorker" in title:
                left.append((i, pid, title.strip()))
    return left


def raylet_pid(lan, i):
    for pid in lan.pids(i):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        if os.path.basename(argv0) == b"raylet":
            return pid
    return None


def check_kill(lan, venv, tmp, head, failures, what):
    """what: "worker" (SIGKILL to one rank's process on the third node) or
    "raylet" (SIGKILL to that node's raylet: Ray takes its workers down)."""
    ready = os.path.join(tmp, f"ready-{what}")
    os.makedirs(ready)
    t0 = time.monotonic()
    p, out, logpath = run_driver(lan, venv, tmp, head, "collie",
                                 ["--run-seconds", str(LONG_JOB_S), "--ready-dir", ready],
                                 f"kill-{what}")
    deadline = time.monotonic() + JOB_TIMEOUT_S

    def started():
        return [n for n in os.listdir(ready) if not n.endswith(".tmp")]
    while len(started()) < WORKERS and p.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    names = started()
    if len(names) < WORKERS:
        rc, text = wait_driver(p, out, logpath, 5)
        print(text[-8000:])
        failures.append(f"kill {what}: only {len(names)} of {WORKERS} ranks started training "
                        f"(driver {rc})")
        return None
    ranks = {}
    for n in names:
        with open(os.path.join(ready, n)) as f:
            r, pid, ip = f.read().split()
        ranks[int(r)] = (int(pid), ip)
    ip = lan.addrs[2]
    on_node = sorted(r for r, (_, at) in ranks.items() if at == ip)
    if not on_node:
        failures.append(f"kill {what}: no rank on {ip}: {ranks}")
        return None
    if what == "worker":
        victims = on_node[-1:]
        pid = ranks[victims[0]][0]
        target = f"rank {victims[0]} (pid {pid}"
    else:
        victims = on_node
        pid = raylet_pid(lan, 2)
        target = f"the raylet (pid {pid}) of ranks {victims} ("
    log(f"kill {what}: all ranks training after {time.monotonic() - t0:.1f} s; SIGKILL to "
        f"{target}, {ip}, namespace {lan.names[2]})")
    if pid is None or pid not in lan.pids(2):
        p.kill()
        wait_driver(p, out, logpath, 5)
        failures.append(f"kill {what}: pid {pid} is not in {lan.names[2]}")
        return None
    t_kill = time.time()
    k0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    rc, text = wait_driver(p, out, logpath, DETECT_LIMIT_S + 30)
    ended = time.monotonic() - k0
    m = re.search(r"ray_netns: fit raised at ([\d.]+): (.*)", text)
    raised = float(m.group(1)) - t_kill if m else None
    log(f"kill {what}: driver exited {rc} {ended:.1f} s after the kill; fit() raised "
        + (f"{raised:.2f} s after it: {m.group(2)[:200]}" if m else "nothing"))
    if rc is None:
        print(text[-8000:])
        failures.append(f"kill {what}: the driver still ran {DETECT_LIMIT_S + 30:.0f} s after "
                        f"the kill (hang)")
        return None
    if not m or rc != 3:
        print(text[-8000:])
        failures.append(f"kill {what}: fit() did not raise (driver exit {rc})")
        return None
    if raised > DETECT_LIMIT_S:
        failures.append(f"kill {what}: fit() raised {raised:.1f} s after the kill, over "
                        f"{DETECT_LIMIT_S:.0f} s")
    # Ray's error names a dead worker: its rank, that its process died, and
    # its node's address.
    ray_err = text[m.start():]
    named = None
    for victim in victims:
        snippet = re.search(rf"\[Rank (?:\d+,)*{victim}(?:,\d+)* Error Snippet\]:(.*?)"
                            r"(?:\n\[Rank |\Z)", ray_err, re.S)
        # A killed worker: "The actor died unexpectedly"; a killed raylet: its
        # workers' health checks fail ("Connection refused" at the node).
        if snippet and ip in snippet.group(1) and (
                "died" in snippet.group(1) or "health check failed" in snippet.group(1)):
            named = (victim, snippet.group(1))
            break
    if named is None:
        print(text[-8000:])
        failures.append(f"kill {what}: Ray's error has no snippet for rank(s) {victims} saying "
                        f"it died on {ip}")
    else:
        died = re.search(r"The actor (?:died|is dead)[^\n]*|A worker health check failed",
                         named[1])
        log(f"kill {what}: Ray's error for rank {named[0]}: "
            f"{died.group(0)[:200] if died else ''} (ip: {ip})")
    # collie's error on a surviving rank names a dead rank and its address.
    # Ray's error may hold the dead rank's snippet alone (its health check
    # can come first), so the surviving ranks' own logs are read too: the
    # driver's copy and the nodes' worker-*.err files.
    logs = [text]
    for i in range(NODES):
        for f in glob.glob(os.path.join(tmp, f"ray{i}", "session_*", "logs", "worker-*.err")):
            with open(f, errors="replace") as fh:
                logs.append(fh.read())
    victim_re = "|".join(str(v) for v in victims)
    collie_err = re.findall(rf"DistBackendError: [^\n]*rank (?:{victim_re}) "
                            rf"\({re.escape(ip)}:\d+\)[^\n]*", "\n".join(logs))
    if collie_err:
        log(f"kill {what}: collie's error: {collie_err[0].strip()[:400]}")
        # When the first surviving rank logged it (collie's log lines carry
        # the local time of day to the millisecond).
        seen = re.findall(r"\[collie rank \d+\] I (\d\d):(\d\d):(\d\d\.\d+) "
                          r"transport_failure\.cc:\d+\] communicator broken", "\n".join(logs))
        if seen:
            lt = time.localtime(t_kill)
            kill_s = lt.tm_hour * 3600 + lt.tm_min * 60 + lt.tm_sec + t_kill % 1
            first = min((int(h) * 3600 + int(m_) * 60 + float(sec) - kill_s) % 86400
                        for h, m_, sec in seen)
            log(f"kill {what}: collie's first 'communicator broken' {first:.3f} s after the "
                f"kill")
    else:
        print(text[-8000:])
        failures.append(f"kill {what}: no surviving rank's DistBackendError names rank(s) "
                        f"{victims} at {ip} ({logpath})")
    # No hang: the surviving ranks go once the driver is gone.
    deadline = time.monotonic() + 20
    while training_workers(lan) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = training_workers(lan)
    if left:
        failures.append(f"kill {what}: training workers still alive 20 s after the driver "
                        f"exited: {left}")
    return raised


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--venv", default=DEFAULT_VENV)
    p.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    p.add_argument("--kill", nargs="+", choices=["worker", "raylet"], default=["worker"],
                   help="what each failure case kills (each is a job of its own)")
    args = p.parse_args(argv)

    python = os.path.join(args.venv, "bin", "python")
    if os.path.realpath(os.path.dirname(sys.executable)) != os.path.realpath(
            os.path.join(args.venv, "bin")):
        if not os.path.exists(python):
            skip(f"no frameworks environment at {args.venv}: test/frameworks/make_venv.sh "
                 "makes it")
        os.execv(python, [python, os.path.abspath(__file__)] + argv)
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    if shutil.which("ip") is None or sh(["ip", "netns", "list"], check=False).returncode != 0:
        skip("no `ip netns` here")
    try:
        import torch
        import ray.train.torch  # noqa: F401
    except ImportError as e:
        skip(f"{sys.executable} lacks Ray Train ({e}): test/frameworks/make_venv.sh installs it")
    if "collie" not in torch.distributed.Backend.backend_list:
        skip(f"collie is not registered in {sys.executable}: is collie_torch installed?")
    if not os.path.exists(ray_bin(args.venv)):
        skip(f"no `ray` command in {args.venv}/bin")
    sys.path.insert(0, HERE)

    # ctest's timeout sends SIGTERM: clean up all the same.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    t_start = time.monotonic()
    failures = []
    tmp = tempfile.mkdtemp(prefix="collie-raynetns-")
    fd = os.open(os.path.join(tmp, "auth_token"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secrets.token_hex(32).encode())
    os.close(fd)
    lan = None
    raised = {}
    try:
        lan = Lan()
        try:
            lan.setup()
        except RuntimeError as e:
            skip(f"cannot make network namespaces: {e}")
        head = start_cluster(lan, args.venv, tmp)
        check_training(lan, args.venv, tmp, head, failures)
        raised = {what: check_kill(lan, args.venv, tmp, head, failures, what)
                  for what in args.kill}
    except Exception as e:  # noqa: BLE001: any error fails the test after cleanup
        import traceback
        traceback.print_exc()
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        if lan is not None:
            killed = lan.kill_all()
            lan.remove()
            left = [ns for ns in lan.names + [lan.hub]
                    if ns in sh(["ip", "netns", "list"], check=False).stdout.split()]
            if left:
                failures.append(f"namespaces left behind: {left}")
            log(f"cleanup: namespaces removed ({killed} processes needed SIGKILL)")
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    total = time.monotonic() - t_start
    if failures:
        finish(1, f"FAIL: ray_netns ({total:.0f} s): " + "; ".join(failures))
    detect = ", ".join(f"killed {k}: fit() raised {v:.2f} s after the kill"
                       for k, v in raised.items())
    print(f"PASS: ray_netns: 6 ranks on 3 namespace hosts, collie = gloo; {detect}; "
          f"{total:.0f} s in all", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
