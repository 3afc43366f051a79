"""The Fashion-MNIST CNN epoch, kiln (bench/cnn_epoch.c) against PyTorch eager
(bench/peers/cnn_torch.py), for the goal "CNN epoch >= 1.5x PyTorch eager".

The two run alternately, ROUNDS rounds, the first to run swapping from round
to round, so that a change in the machine's load hits both alike; each run is
a new process that trains the same batches from a fresh model and times its
warm steps. The figure is the median warm epoch of each over the rounds, and
their ratio PyTorch/kiln (above 1: kiln is faster). PyTorch runs with
BENCH_THREADS threads (default: every CPU), as kiln does (KILN_THREADS).

On a machine whose cores are busy with other work, PyTorch's OpenMP threads,
which spin while they wait for each other, lose far more than kiln's: on 2
cores under a load of 4, one PyTorch step took 330 ms on 2 threads and 64 ms
on 1. Only a run at a load below the number of cores measures the goal, so the
load average is printed at the start and at the end.

Usage: python cnn_epoch.py KILN_BINARY [--rounds R] [--batches N]
(run with the Python that has torch: bench/run.sh uses bench/peers/.venv).
The text goes to stdout: bench/run.sh keeps it as bench/results_cnn.txt."""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r": ([0-9]+) batches of ([0-9]+),.* warm epoch ([0-9.]+) s")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(name, cmd, env):
    """Runs one side's epoch; returns its line, its warm epoch in seconds and
    its batches (count, size)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    m = LINE.search(p.stdout)
    if p.returncode != 0 or not m:
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit(f"cnn_epoch: the {name} run failed (status {p.returncode})")
    return p.stdout.strip(), float(m.group(3)), (int(m.group(1)), int(m.group(2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln_binary")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=0, help="0: the epoch's 468 full batches")
    args = ap.parse_args()
    threads = os.environ.get("BENCH_THREADS") or str(os.cpu_count())
    extra = ["--batches", str(args.batches)] if args.batches else []
    kiln_env = dict(os.environ, KILN_THREADS=threads)
    # The peer as bench/run.sh runs the others: as many threads as kiln, and
    # OpenBLAS's two tuning variables unset (they slow a current PyTorch).
    torch_env = {k: v for k, v in os.environ.items()
                 if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    torch_env.update(BENCH_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
                     OPENBLAS_NUM_THREADS=threads, PYTHONDONTWRITEBYTECODE="1")
    sides = [("kiln", [args.kiln_binary] + extra, kiln_env),
             ("torch", [sys.executable, os.path.join(HERE, "peers", "cnn_torch.py")] + extra,
              torch_env)]

    now = datetime.datetime.now(datetime.timezone.utc)
    print(f"measured {now:%Y-%m-%d %H:%M} UTC, load average {loadavg()}, {threads} threads",
          flush=True)
    times = {"kiln": [], "torch": []}
    shapes = set()
    for r in range(args.rounds):
        for name, cmd, env in sides if r % 2 == 0 else sides[::-1]:
            line, epoch, shape = run(name, cmd, env)
            times[name].append(epoch)
            shapes.add(shape)
            print(f"round {r + 1}: {line}", flush=True)
    if len(shapes) != 1:
        sys.exit(f"cnn_epoch: the two sides trained different batches: {sorted(shapes)}")
    (batches, size), = shapes
    kiln, torch = statistics.median(times["kiln"]), statistics.median(times["torch"])
    print(f"cnn epoch of {batches} batches of {size}, warm, median of {args.rounds} rounds: "
          f"kiln {kiln:.2f} s, PyTorch eager {torch:.2f} s, PyTorch/kiln {torch / kiln:.2f}")
    print(f"load average at the end {loadavg()}")


if __name__ == "__main__":
    main()
