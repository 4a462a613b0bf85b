"""Starting the ranks of a torch.distributed job for the collie_torch tests.

Every rank is a real process: the test's Python (a virtual environment
with torch 2.x and collie_torch installed by pip) running workers.py (or any
script) with torch's environment (RANK, WORLD_SIZE, LOCAL_RANK, and
MASTER_ADDR/MASTER_PORT or an init file). The job is bounded: past its
timeout every rank is killed and the test fails with each rank's output.

ctest sets COLLIE_BIN_DIR (collie-run, collie-store); see CMakeLists.txt next
to this file.
"""
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = sys.executable  # the virtual environment's, which has torch and collie_torch
WORKERS = os.path.join(HERE, "workers.py")
ZYGOTE = os.path.join(HERE, "zygote.py")
BIN_DIR = os.environ.get("COLLIE_BIN_DIR", "")
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", ".."))

# A loaded 2-core machine runs 2-4 ranks that each import torch (seconds).
JOB_TIMEOUT = float(os.environ.get("COLLIE_TORCH_TEST_TIMEOUT", "240"))


def free_port():
    """A port that was free a moment ago, for launchers that need a number
    (torchrun's static rendezvous, env://); collie's own sockets use port 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(extra=None):
    env = dict(os.environ)
    # A launcher's variables in the test's own environment must not leak in.
    for k in list(env):
        if k.startswith(("TORCHELASTIC_", "PET_", "SLURM_", "OMPI_")) or k in (
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "GROUP_RANK", "ROLE_RANK", "COLLIE_JOB_SECRET"):
            del env[k]
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class Result:
    def __init__(self, rank, returncode, out, err):
        self.rank, self.returncode, self.out, self.err = rank, returncode, out, err

    def __repr__(self):
        return (f"--- rank {self.rank} exit {self.returncode} ---\n{self.out}\n"
                f"--- rank {self.rank} stderr ---\n{self.err}")


def report(results):
    return "\n".join(repr(r) for r in results)


def spawn_ranks(world, args, env=None, init="file", script=WORKERS):
    """The ranks of a Python script, forked from one process that imported
    torch (zygote.py) unless COLLIE_TEST_FORK=0: the job's environment is
    the same, and torch's import is paid once, not once per rank."""
    if os.environ.get("COLLIE_TEST_FORK", "1") == "0":
        return spawn_ranks_of([PYTHON, script], world, args, env=env, init=init)
    return _Zygote(script, world, args, job_env(world, env, init)).ranks


def spawn_ranks_of(argv, world, args, env=None, init="file"):
    """Starts `world` ranks of `argv args...` and returns the Popen objects.
    init: "file" (a fresh init file, passed as COLLIE_TEST_INIT=file://...),
    "env" (MASTER_ADDR/MASTER_PORT, rank 0 hosts torch's TCPStore) or "tcp"
    (COLLIE_TEST_INIT=tcp://127.0.0.1:PORT)."""
    common = job_env(world, env, init)
    procs = []
    for rank in range(world):
        e = dict(common, RANK=str(rank), LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen(argv + [str(a) for a in args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    return procs


def job_env(world, env, init):
    common = base_env(env)
    common["WORLD_SIZE"] = str(world)
    common["LOCAL_WORLD_SIZE"] = str(world)
    if init == "file":
        fd, path = tempfile.mkstemp(prefix="collie_torch_init_")
        os.close(fd)
        os.unlink(path)  # torch's FileStore creates it
        common["COLLIE_TEST_INIT"] = "file://" + path
    elif init == "env":
        common.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                      COLLIE_TEST_INIT="env://")
    elif init == "tcp":
        common["COLLIE_TEST_INIT"] = f"tcp://127.0.0.1:{free_port()}"
    else:
        raise ValueError(init)
    return common


class _Zygote:
    """One zygote.py process and the ranks it forks. Each rank's output goes
    to files of its own (no pipe can fill while another rank is waited on);
    its pid and exit code come over the zygote's stdout."""

    def __init__(self, script, world, args, env):
        self.files = [tempfile.TemporaryFile("w+b") for _ in range(2 * world)]
        fds = [f.fileno() for f in self.files]
        self.err = tempfile.TemporaryFile("w+b")
        self.proc = subprocess.Popen(
            [PYTHON, ZYGOTE, script, str(world), ",".join(map(str, fds))] + [str(a) for a in args],
            env=env, stdout=subprocess.PIPE, stderr=self.err, pass_fds=fds,
            start_new_session=True)
        self.pids, self.codes, self.buffer, self.ended = {}, {}, b"", False
        self.ranks = [_ForkedRank(self, rank) for rank in range(world)]

    def read(self, deadline):
        """Reads what the zygote has said, waiting until `deadline` for more;
        False once it has ended. A rank it never reported ends as the
        zygote did."""
        if self.ended:
            return False
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            return True
        data = os.read(fd, 4096)
        if not data:
            self.ended = True
            self.proc.wait()
            for rank in range(len(self.ranks)):
                self.codes.setdefault(rank, self.proc.returncode or -signal.SIGKILL)
            return False
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            what, rank, value = line.decode().split()
            (self.pids if what == "pid" else self.codes)[int(rank)] = int(value)
        return True

    def drain(self):
        """Reads what the zygote has said so far, without waiting."""
        while not self.ended and select.select([self.proc.stdout.fileno()], [], [], 0)[0]:
            self.read(time.monotonic())

    def kill(self):
        self.drain()  # every fork it has reported, before it can report no more
        for pid in self.pids.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _ForkedRank:
    """What collect() needs of a Popen, for a rank the zygote forked."""

    def __init__(self, zygote, rank):
        self.zygote, self.rank = zygote, rank

    @property
    def pid(self):
        return self.zygote.pids.get(self.rank)

    @property
    def returncode(self):
        return self.zygote.codes.get(self.rank)

    def poll(self):
        self.zygote.drain()
        return self.returncode

    def kill(self):
        self.zygote.kill()

    def communicate(self, timeout=None):
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.returncode is None and self.zygote.read(deadline):
            if time.monotonic() >= deadline and self.returncode is None:
                raise subprocess.TimeoutExpired(f"rank {self.rank}", timeout)
        if len(self.zygote.codes) == len(self.zygote.ranks):
            reap_by = time.monotonic() + 30  # the zygote exits next: reap it
            while self.zygote.read(reap_by) and time.monotonic() < reap_by:
                pass
        out, err = (self._text(f) for f in self.zygote.files[2 * self.rank:2 * self.rank + 2])
        if self.zygote.ended and self.rank not in self.zygote.pids:
            err += "\n[harness] zygote.py ended before forking this rank:\n" + self._text(self.zygote.err)
        return out, err

    @staticmethod
    def _text(f):
        f.seek(0)
        return f.read().decode(errors="replace")


def collect(procs, timeout=JOB_TIMEOUT):
    """Waits for every process (killing all of them past `timeout`) and
    returns their Results; a rank killed by the timeout exits -9."""
    deadline = time.monotonic() + timeout
    results = []
    for rank, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    if isinstance(q, _ForkedRank):
                        q.kill()
                    else:
                        os.killpg(q.pid, signal.SIGKILL)
            out, err = p.communicate()
            err += f"\n[harness] killed: the job ran past its {timeout:.0f} s timeout"
        results.append(Result(rank, p.returncode, out, err))
    return results


def run_job(world, args, env=None, init="file", timeout=JOB_TIMEOUT):
    return collect(spawn_ranks(world, args, env=env, init=init), timeout=timeout)


def run_command(argv, env=None, timeout=JOB_TIMEOUT):
    """One launcher process (torchrun, collie-run) that starts the ranks."""
    p = subprocess.Popen(argv, env=base_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    return collect([p], timeout=timeout)[0]


def run_command_killing(argv, env=None, timeout=JOB_TIMEOUT):
    """Runs a launcher whose victim rank writes its pid into the FIFO named
    by COLLIE_TEST_KILL_FIFO when it is ready to die, and SIGKILLs that pid
    once it arrives (nothing timed: the FIFO says when). Returns the
    launcher's Result and the victim's pid (None when it never wrote)."""
    with tempfile.TemporaryDirectory(prefix="collie_torch_kill_") as tmp:
        fifo = os.path.join(tmp, "victim_pid")
        os.mkfifo(fifo)
        # Open both ends here: the read end never sees EOF before the pid.
        read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        keep_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        out_file, err_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        p = subprocess.Popen(argv, env=base_env(dict(env or {}, COLLIE_TEST_KILL_FIFO=fifo)),
                             stdout=out_file, stderr=err_file, text=True, start_new_session=True)
        deadline = time.monotonic() + timeout
        pid, data = None, b""
        try:
            while pid is None and p.poll() is None and time.monotonic() < deadline:
                ready, _, _ = select.select([read_fd], [], [], min(1.0, timeout))
                if ready:
                    data += os.read(read_fd, 64)
                    if data.endswith(b"\n"):
                        pid = int(data)
                        os.kill(pid, signal.SIGKILL)
            p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            note = ""
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            note = f"\n[harness] killed: the job ran past its {timeout:.0f} s timeout"
        finally:
            os.close(read_fd)
            os.close(keep_fd)
        out_file.seek(0)
        err_file.seek(0)
        return Result(0, p.returncode, out_file.read(), err_file.read() + note), pid


def assert_ok(results):
    bad = [r for r in results if r.returncode != 0]
    assert not bad, "rank(s) %s failed:\n%s" % ([r.rank for r in bad], report(results))
