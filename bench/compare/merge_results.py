"""Joins run_compare.sh's per-peer result files into one markdown table per
world size: time and bus bandwidth of collie and each peer, and the ratio
peer time / collie time (above 1: collie is faster)."""
import os
import sys

PEERS = ["collie", "collie_tcp", "gloo", "mpi", "mpi_sm", "torch"]
NAMES = {
    "collie": "collie",  # its default on one host: shared memory
    "collie_tcp": "collie TCP",
    "gloo": "Gloo ring",
    "mpi": "Open MPI TCP",
    "mpi_sm": "Open MPI shm",
    "torch": "torch gloo",
}


def us(t):
    """A time in us: two decimals below 10 us, where the runs differ by hundredths."""
    return f"{t:.2f}" if t < 10 else f"{t:.1f}"


def load(path):
    rows = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 4:
                    rows[int(parts[0])] = (float(parts[1]), float(parts[3]))
    return rows


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def main():
    out, worlds = sys.argv[1], sys.argv[2:]
    tcp = {}
    with open(os.path.join(out, "tcp_stream.txt")) as f:
        for line in f:
            k, v = line.split()
            tcp[k] = float(v)
    t = tcp.get("tcp_stream_gbps", 0.0)
    print(f"T (one loopback TCP stream) = {t:.2f} GB/s, memcpy = {tcp.get('memcpy_gbps', 0):.2f} GB/s\n")
    for n in worlds:
        data = {p: load(os.path.join(out, f"{p}_N{n}.txt")) for p in PEERS}
        present = [p for p in PEERS if data[p]]
        sizes = sorted(set().union(*[set(data[p]) for p in present]))
        print(f"### N = {n} (T/N = {t / int(n):.2f} GB/s)\n")
        head = ["size"] + [f"{NAMES[p]} us / busbw" for p in present]
        head += [f"{NAMES[p]}/collie time" for p in present if p != "collie"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for s in sizes:
            cells = [human(s)]
            for p in present:
                v = data[p].get(s)
                cells.append(f"{us(v[0])} / {v[1]:.3f}" if v else "-")
            c = data["collie"].get(s)
            for p in present:
                if p == "collie":
                    continue
                v = data[p].get(s)
                cells.append(f"{v[0] / c[0]:.2f}x" if v and c and c[0] > 0 else "-")
            print("| " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()
