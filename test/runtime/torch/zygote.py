"""The ranks of one job, forked from one Python that has imported torch.

    python zygote.py SCRIPT WORLD OUT0,ERR0,OUT1,ERR1,... [ARG...]

`import torch` costs about 4 CPU-seconds, and a 2-core machine running a
4-rank job pays it 4 times before any rank starts; here it is paid once.
This process imports torch with the job's environment, then forks WORLD
children. Each one starts a session of its own (as start_new_session=True
would), writes its stdout and stderr to the inherited descriptors, sets RANK
and LOCAL_RANK, and runs SCRIPT as __main__ with ARG... as `python SCRIPT
ARG...` would: its exit code, its traceback and its atexit handlers are the
script's. Nothing has started a thread or touched a device before the fork
(importing torch does neither; OMP_NUM_THREADS=1 keeps OpenBLAS's server
away), so every child is what a fresh process would be after that import.

On its own stdout this process writes "pid RANK PID" after each fork and
"exit RANK CODE" (a signal as -N) as each child ends; harness.py reads them.
"""
import os
import runpy
import sys


def run_rank(rank, script, args, fds):
    os.setsid()
    os.dup2(fds[2 * rank], 1)
    os.dup2(fds[2 * rank + 1], 2)
    for fd in fds:
        os.close(fd)
    os.environ["RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = str(rank)
    sys.argv = [script] + args
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")
    sys.exit(0)


def main():
    script, world = sys.argv[1], int(sys.argv[2])
    fds = [int(fd) for fd in sys.argv[3].split(",")]
    args = sys.argv[4:]
    status = os.fdopen(os.dup(1), "w", buffering=1)
    try:
        import torch  # noqa: F401  the point of this process
    except Exception:  # noqa: BLE001  each rank's own import says why
        pass
    ranks = {}
    for rank in range(world):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status.close()
            run_rank(rank, script, args, fds)  # never returns
        ranks[pid] = rank
        print(f"pid {rank} {pid}", file=status)
    for fd in fds:
        os.close(fd)
    while ranks:
        pid, st = os.wait()
        if pid in ranks:
            print(f"exit {ranks.pop(pid)} {os.waitstatus_to_exitcode(st)}", file=status)


if __name__ == "__main__":
    main()
