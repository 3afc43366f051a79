"""The short table bench/gpu_check.sh ends with: kiln on the GPU, lazy
against eager, against the device's own limits (a device-to-device copy's
bandwidth and the f32 peak, measured in the same run by kiln's bench
programs) and against PyTorch (eager, and torch.compile when it ran) and
cuBLAS, every figure a ratio of two measurements of this run.

Usage: gpu_report.py CHECKS KILN_JSONL... [--torch TORCH_JSONL] [--compile TC_JSONL]
[--blas BLAS_JSONL]. CHECKS holds lines "name<TAB>verdict<TAB>detail" of the
correctness steps. Files that are missing or empty count as not run."""
import json
import sys


def records(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def main(argv):
    opts = {"--torch": [], "--compile": [], "--blas": []}
    kiln, key = [], None
    checks = argv[1]
    for a in argv[2:]:
        if a in opts:
            key = a
        elif key:
            opts[key].append(a)
            key = None
        else:
            kiln.append(a)
    recs = [r for p in kiln for r in records(p)]
    machine = next((r for r in recs if r.get("suite") == "machine"), None)
    by = {}
    for r in recs:
        if "workload" in r and "median_ms" in r:
            by[(r["workload"], r.get("shape", ""), r["impl"])] = r
    peers = {}
    for flag, impl in (("--torch", "torch"), ("--compile", "torch.compile")):
        for p in opts[flag]:
            for r in records(p):
                if "median_ms" in r and "error" not in r:
                    peers[(r["workload"], r.get("shape", ""), impl)] = r["median_ms"]
    print("| check | result | detail |")
    print("| --- | --- | --- |")
    try:
        with open(checks) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3:
                    print(f"| {parts[0]} | {parts[1]} | {parts[2]} |")
    except OSError:
        print("| checks | not run | |")
    print()
    if machine:
        print(f"device: {machine.get('cpu')} ({machine.get('threads')} multiprocessors or "
              f"threads): copy or triad "
              f"{machine.get('triad_gbps', 0):.0f} GB/s, f32 peak "
              f"{machine.get('fma_gflops', 0) / 1e3:.1f} TFLOP/s (measured in this run)")
        print()
    print("| workload | shape | lazy ms | eager/lazy | % of limit | torch ms | kiln/torch "
          "speed | torch.compile ms | kiln/compile speed |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    seen = set()
    for (w, s, impl), r in by.items():
        if impl != "kiln-lazy" or (w, s) in seen or "error" in r:
            continue
        seen.add((w, s))
        lazy = r["median_ms"]
        pct = r.get("pct_bw") or r.get("pct_peak") or 0
        t, tc = peers.get((w, s, "torch")), peers.get((w, s, "torch.compile"))
        cells = [w, s, f"{lazy:.3f}", f"{r['eager_over_lazy']:.2f}" if "eager_over_lazy" in r
                 else "", f"{pct:.0f}%" if pct else "",
                 f"{t:.3f}" if t else "", f"{t / lazy:.2f}x" if t else "",
                 f"{tc:.3f}" if tc else "", f"{tc / lazy:.2f}x" if tc else ""]
        print("| " + " | ".join(cells) + " |")
    failed = [r for r in recs if "error" in r]
    for r in failed:
        print(f"| {r.get('workload')} | {r.get('shape', '')} | FAILED: {r['error'][:80]} "
              "| | | | | | |")
    blas = [r for p in opts["--blas"] for r in records(p)]
    if blas:
        print()
        print("| matmul | shape | cuBLAS ms | kiln kernel ms | kiln/cuBLAS time | kiln "
              "TFLOP/s |")
        print("| --- | --- | --- | --- | --- | --- |")
        ref = {(r["workload"], r["shape"]): r for r in blas if r.get("impl") == "cublas"}
        for r in blas:
            if r.get("impl") not in ("kiln-lazy", "kiln-generated"):
                continue
            c = ref.get((r["workload"], r["shape"]))
            print(f"| {r['workload']} ({r['impl']}) | {r['shape']} | {c['median_ms']:.3f} | "
                  f"{r['kernel_ms']:.3f} | {r['kernel_over_cublas']:.2f} | {r['tflops']:.1f} |"
                  if c else f"| {r['workload']} | {r['shape']} | | {r['kernel_ms']:.3f} | | |")


if __name__ == "__main__":
    main(sys.argv)
