"""Turns the JSON lines of one benchmark run (kiln's programs and the peers,
one file each, in a results directory) into bench/RESULTS.md and the plot
bench/results.png. Run from the peers' virtual environment (it needs
matplotlib): bench/run.sh does. Usage: report.py RESULTS_DIR OUT_MD OUT_PNG."""
import collections
import datetime
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PEERS = ["numpy", "torch", "torch.compile", "tinygrad"]
OPS_ORDER = ["gelu_chain", "chain11", "softmax_rows", "softmax_wide_rows", "layer_norm_rows",
             "sum_all",
             "column_sums", "matmul", "matmul_bias_relu", "conv2d_3x3", "transformer_block_fwd"]
DESCRIPTION = {
    "gelu_chain": "gelu(a*b+c) (erf form)",
    "chain11": "11 elementwise ops with tanh and sigmoid",
    "column_sums": "sums down columns",
    "softmax_rows": "softmax over rows",
    "softmax_wide_rows": "softmax over rows of logits N(0, 30^2) (e^(x - max) mostly below 2^-126)",
    "layer_norm_rows": "layer-norm over rows (no affine)",
    "sum_all": "sum of all elements",
    "matmul": "matmul",
    "matmul_bias_relu": "relu(a@b + bias)",
    "mlp_softmax": "softmax(gelu(x@w1+b1)@w2+b2)",
    "conv2d_3x3": "conv2d 3x3, pad 1",
    "transformer_block_fwd": "transformer block forward",
}


def load(directory):
    records = []
    for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    records.append(json.loads(line))
    return records


def cpu_info():
    model, cores = "unknown", 0
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("processor"):
                    cores += 1
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f", {kb / 2**20:.0f} GiB of memory"
    except (OSError, ValueError, IndexError):
        pass
    return f"{model}, {cores} logical CPUs{mem}"


def key(r):
    return (r["workload"], r.get("shape", ""))


def order(k):
    w, shape = k
    idx = OPS_ORDER.index(w) if w in OPS_ORDER else len(OPS_ORDER)
    size = 0
    try:
        size = int(shape)
    except ValueError:
        size = 10**9
    return (idx, size, shape)


def fmt_ms(v):
    return "—" if v is None else (f"{v:.3g}" if v < 10 else f"{v:.0f}")


def fmt_ratio(v):
    return "—" if v is None else f"{v:.2f}"


def table(header, rows, align):
    out = ["| " + " | ".join(header) + " |",
           "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def label(k):
    w, shape = k
    return f"{DESCRIPTION.get(w, w)}, {shape}"


def baseline_section(base_dir, ops, keys):
    """This tree's lazy and eager times against the baseline revision's, run
    alternately in the same session: a ratio above 1 means this tree is faster."""
    with open(os.path.join(base_dir, "REVISION")) as f:
        rev = f.read().strip()
    base = collections.defaultdict(dict)
    for r in load(base_dir):
        if r["suite"] in ("ops", "nn") and "error" not in r:
            base[key(r)][r["impl"]] = r
    rows, slower = [], []
    for k in keys:
        cells = []
        for impl in ("kiln-lazy", "kiln-eager"):
            now, was = ops[k].get(impl), base[k].get(impl)
            if now is None or was is None or "error" in now:
                cells += ["—", "—", "—"]
                continue
            ratio = was["median_ms"] / now["median_ms"]
            cells += [fmt_ms(was["median_ms"]), fmt_ms(now["median_ms"]), fmt_ratio(ratio)]
            if ratio < 0.9:
                slower.append(f"{label(k)} ({impl}: {ratio:.2f})")
        if any(c != "—" for c in cells):
            rows.append([label(k)] + cells)
    out = [f"## This tree against {rev}", "",
           f"kiln's own programs built at {rev} and at this tree, run alternately in this "
           "session. *before/after* above 1 means this tree is faster.", ""]
    out += table(["workload", f"lazy ms {rev}", "lazy ms now", "before/after",
                  f"eager ms {rev}", "eager ms now", "before/after"], rows,
                 ["l", "r", "r", "r", "r", "r", "r"])
    out += ["", "Slower by more than 10%: " + ("; ".join(slower) if slower else "none") + ".", ""]
    return out


def dist_section(out_md):
    """bench/dist.sh's last output (bench/results_dist.txt, beside RESULTS.md: run.sh
    clears results/), kept as it printed."""
    path = os.path.join(os.path.dirname(os.path.abspath(out_md)), "results_dist.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read().strip()
    return ["## Collectives: kiln_all_reduce against MPI_Allreduce", "",
            "From `./kiln.sh bench-dist` (bench/dist_allreduce.c under `mpirun`; its own run, "
            "so its date and load are its first line). Bus bandwidth is bytes / time x "
            "2(N-1)/N, the slowest rank's median. MPI is Open MPI's MPI_Allreduce in place, "
            "its best case: kiln_all_reduce keeps its source, so it first copies the source "
            "into the result's buffer, and every sync agrees on its collectives first (one "
            "small all-reduce). memcpy is this machine's copy rate at that size. The last "
            "lines are data-parallel MLP steps over 2 ranks and over 1 (on 2 cores the ranks "
            "share them, so the 2-rank figure measures the collectives' cost, not a speed-up).",
            "", "```", text, "```", ""]


def text_section(out_md, name, heading, intro):
    """A benchmark's last text output (bench/<name>, beside RESULTS.md, written by run.sh)
    under heading, after intro; nothing when it has not run."""
    path = os.path.join(os.path.dirname(os.path.abspath(out_md)), name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        text = f.read().strip()
    # run.sh's first line, "measured DATE": a text may be newer than the tables
    # above when its benchmark was run on its own.
    first, _, rest = text.partition("\n")
    if first.startswith("measured "):
        intro += " Measured on " + first[len("measured "):].strip() + "."
        text = rest.strip()
    return [heading, "", intro, "", "```", text, "```", ""]


def embedding_section(out_md):
    return text_section(
        out_md, "results_embedding.txt",
        "## Embedding: a gather of rows against the one-hot matmul it was",
        "From bench/embedding.c (its load average is its first line): "
        "256 tokens from a [50257, 768] f32 table, kiln_embedding (one indexed load per "
        "element, GRAPH_GATHER) against the one-hot [256, 50257] matmul it replaced, "
        "written with the same public calls; then the weight's gradient through each "
        "(the gather's rule for rows is one matmul of the rows' one-hot).")


def gpt2_section(out_md):
    return text_section(
        out_md, "results_gpt2.txt", "## A GPT-2 training step",
        "From bench/gpt2.c (its load average is its first line): "
        "token and position embeddings, pre-norm blocks with causal attention and a "
        "tanh-GELU MLP, the head tied to the token embedding, mean cross-entropy, the "
        "backward pass and AdamW, written with kiln.h as a user would; the loss is the "
        "step's one sync point. Kernel kinds come from the fused ops of a profiled warm "
        "step (copy-only: nothing but movements); the cold first step compiles into an "
        "empty disk cache, the warm-disk one is a new process over that cache.")


def dynamic_section(out_md):
    return text_section(
        out_md, "results_dynamic.txt", "## Sizes read at run time against literals",
        "From bench/dynamic.c (its load average is its first line): one "
        "size run by a program shared by graphs of other sizes (kiln_ctx_set_dynamic: it "
        "reads its sizes at run time) and by one compiled for that size, in two contexts "
        "of one process, steps alternating; the first step at the new size (shared: "
        "lowering only; specialised: a compile into an empty disk cache) and the median "
        "warm step, on both CPU compiler paths.")


def overhead_section(out_md):
    return text_section(
        out_md, "results_overhead.txt", "## What kiln costs beside its kernels",
        "From bench/overhead.c (its load average is its first line): recording an op (chains of "
        "1000 and of 100000 elementwise ops, never synced); a graph-cache hit (kiln_realize "
        "alone on a realized chain of 100 and of 1000 ops, one fused kernel on 16 elements, and "
        "the line through the two; each op is three graph nodes: the op, its bound scalar and "
        "that scalar's broadcast view); 1000 small independent reductions at one sync into an empty kernel "
        "cache (joined by one cat: a kernel each, and one per region of the cat); a fused op "
        "into a 64 MB output in a context that keeps no released buffer (fresh memory each step, "
        "its page faults counted: huge pages make them 32 a step, not 16384; what remains is the "
        "kernel zeroing 64 MB it hands out, a fourth more traffic for a kernel that reads 64 MB "
        "and writes 64 MB) "
        "against one that reuses it.")


def conv_section(out_md):
    return text_section(
        out_md, "results_conv.txt", "## A convolution layer alone",
        "From bench/conv.c (its load average is its first line): kiln_conv2d on the "
        "layer of the table above (x 8x64x32x32, w 64x64x3x3, padding 1, a bias), "
        "forward, and forward with the gradients of x, w and b, median of its steps "
        "after a warm-up, with the kernels per step; where a line names a revision, that "
        "revision's build ran alternately with this tree's under the same load.")


def tune_section(out_md):
    return text_section(
        out_md, "results_tune.txt", "## KILN_TUNE=1 against the heuristics' plans",
        "From bench/tune.sh (its load averages are its second and last lines): the products "
        "of the table above and the nn workloads, kiln-lazy, each in a fresh kernel cache of "
        "its own, one with KILN_TUNE=1 (its first run, not counted, compiled and timed every "
        "variant of every product and fused attention); then the two alternately, the best "
        "median of each. Elementwise and reduction kernels have no variants and are left out.")


def cuda_host_section(out_md):
    return text_section(
        out_md, "results_cuda_host.txt", "## The CUDA device's host time per replayed step",
        "From bench/cuda_host.c on the stand-in driver (tests/fake_cuda.c, whose kernels take "
        "no time and compute nothing; no GPU here): a 12-layer GELU MLP (width 256, batch 64) "
        "with cross-entropy and AdamW, its step recorded (record_us: the op calls, backward "
        "and the optimiser's step) and synced (sync_us: capture, the graph cache, and the "
        "launches, kernel by kernel with graphs=0 or as one CUDA graph with graphs=1), median "
        "of 30 replayed steps, three rounds. What is left is kiln's own host cost; a GPU's "
        "driver adds its launch costs (a CUDA graph launch is one).")


def cnn_section(out_md):
    return text_section(
        out_md, "results_cnn.txt", "## A Fashion-MNIST CNN epoch against PyTorch eager",
        "From bench/cnn_epoch.py (the load average at its start is its first line, at its end "
        "its last): examples/fashion_mnist.c's CNN (conv 3x3 1->16, ReLU, max-pool 2, conv 3x3 "
        "16->32, ReLU, max-pool 2, linear to 10; mean cross-entropy; AdamW lr 3e-3, weight "
        "decay 1e-2, cosine schedule; batches of 128) trained on the Fashion-MNIST training "
        "images by bench/cnn_epoch.c and by the same model in PyTorch eager "
        "(bench/peers/cnn_torch.py), same batches in the same order, in new processes run "
        "alternately. An epoch is its 468 full batches (59904 images; the last, smaller batch "
        "would be a second program shape); the first step (kiln's compile) is not timed, and "
        "the warm epoch is the mean warm step times the batches. *PyTorch/kiln* is the ratio "
        "of the medians over the rounds: above 1, kiln is faster. PyTorch's OpenMP threads "
        "spin while they wait, so a load above the machine's cores slows it far more than "
        "kiln: only a run at a lower load measures the goal.")


def _ratio(ops, k, peer):
    """The peer's median over kiln-lazy's for workload key k, or None."""
    a, b = ops.get(k, {}).get(peer), ops.get(k, {}).get("kiln-lazy")
    if not a or not b or "error" in a or "error" in b:
        return None
    return a["median_ms"] / b["median_ms"]


def _find(ops, workload):
    """The workload keys of that workload, in the report's order."""
    return sorted((k for k in ops if k[0] == workload), key=order)


def _grep(out_md, name, pattern):
    """The first group of pattern in a text result beside RESULTS.md, or None."""
    try:
        with open(os.path.join(os.path.dirname(out_md) or ".", name)) as f:
            m = re.search(pattern, f.read())
    except OSError:
        return None
    return m.group(1) if m else None


def goals_section(ops, machine, out_md, compile_ms):
    """The CPU issue's goals beside what this run measured: a row per goal,
    'not measured' where no benchmark here measures it yet."""
    rows = []

    def row(what, goal, got, met):
        rows.append([what, goal, got if got is not None else "not measured",
                     "—" if got is None or met is None else ("yes" if met else "**no**")])

    def pct(workload):
        for k in _find(ops, workload):
            r = ops[k].get("kiln-lazy")
            if r and "error" not in r and r.get("gbps") and machine:
                return 100 * r["gbps"] / machine["triad_gbps"]
        return None

    for w, what, goal in [("gelu_chain", "fused gelu(a*b+c), 16M", 80),
                          ("softmax_rows", "row softmax 4096x4096", 70),
                          ("layer_norm_rows", "layer-norm 4096x4096", 70),
                          ("sum_all", "sum of 64M", 80)]:
        v = pct(w)
        row(what, f">= {goal}% of triad", None if v is None else f"{v:.0f}%",
            None if v is None else v >= goal)
    v = pct("chain11")
    row("the 11-op chain with tanh and sigmoid, 16M", ">= 80% of triad",
        None if v is None else f"{v:.0f}%", None if v is None else v >= 80)
    ks = _find(ops, "chain11")
    lz = ops[ks[0]].get("kiln-lazy") if ks else None
    ratio = lz.get("eager_over_lazy") if lz and "error" not in lz else None
    row("the 11-op chain with tanh and sigmoid, 16M", ">= 4x its eager mode",
        None if ratio is None else f"{ratio:.2f}x", None if ratio is None else ratio >= 4)
    v = pct("column_sums")
    row("column sums 4096x4096", ">= 70% of triad", None if v is None else f"{v:.0f}%",
        None if v is None else v >= 70)
    fr = _grep(out_md, "results_overhead.txt", r"fresh/reused ([0-9.]+)")
    faults = _grep(out_md, "results_overhead.txt", r"page faults per step ([0-9]+) fresh")
    row("a fused op into a fresh 64 MB output", "within 15% of a reused one",
        None if fr is None else f"fresh/reused {fr} ({faults} page faults a step)",
        None if fr is None else float(fr) <= 1.15)
    mm = [(_ratio(ops, k, "numpy"), k) for k in _find(ops, "matmul")]
    mm = [(v, k) for v, k in mm if v is not None]
    if mm:
        worst = min(mm)
        row("matmul, square and skinny", ">= OpenBLAS (NumPy), every shape",
            f"worst {worst[0]:.2f} ({worst[1][1]}), best {max(mm)[0]:.2f}", worst[0] >= 1)
    else:
        row("matmul, square and skinny", ">= OpenBLAS (NumPy), every shape", None, None)
    conv = next((ops[k].get("kiln-lazy") for k in _find(ops, "conv2d_3x3")), None)
    ref = next((ops[k].get("kiln-lazy") for k in _find(ops, "matmul") if k[1] == "1024"), None)
    if conv and ref and "error" not in conv and "error" not in ref:
        share = conv["gflops"] / ref["gflops"]
        row("conv2d 3x3 forward", ">= 60% of the matmul rate (1024)", f"{100 * share:.0f}%",
            share >= 0.6)
    else:
        row("conv2d 3x3 forward", ">= 60% of the matmul rate (1024)", None, None)
    for w, what in [("conv2d_3x3", "conv2d 3x3 forward"),
                    ("attention_fwd_bwd", "attention forward+backward, b8 s256 d512 h8"),
                    ("mlp_train_step", "MLP training step"),
                    ("transformer_block_fwd_bwd", "transformer block forward+backward")]:
        ks = _find(ops, w)
        te = _ratio(ops, ks[0], "torch") if ks else None
        tc = _ratio(ops, ks[0], "torch.compile") if ks else None
        goals = {"conv2d_3x3": (None, 1.0), "attention_fwd_bwd": (1.5, None)}.get(w, (1.5, 1.2))
        if goals[0] is not None:
            row(what, f">= {goals[0]}x PyTorch eager", None if te is None else f"{te:.2f}x",
                None if te is None else te >= goals[0])
        if goals[1] is not None:
            row(what, f">= {goals[1]}x torch.compile", None if tc is None else f"{tc:.2f}x",
                None if tc is None else tc >= goals[1])
    # A quick run measures only the small model (L4 d256); its rows say so.
    model = "full" if _grep(out_md, "results_gpt2.txt", r"(gpt2 full:)") else "small"
    name = "GPT-2 step" + ("" if model == "full" else " (only the L4 d256 model in this run)")
    step = _grep(out_md, "results_gpt2.txt", rf"gpt2 {model}: .*warm step median ([0-9.]+ ms)")
    copies = _grep(out_md, "results_gpt2.txt",
                   rf"gpt2 {model}: copy-only kernels per layer ([0-9.]+)")
    peak = _grep(out_md, "results_gpt2.txt",
                 rf"gpt2 {model}: peak resident.*peak/\(their sum\) ([0-9.]+)")
    row("GPT-2 step L12 d768 B4 T64", ">= 2x faster than when the goal was set",
        step if model == "full" else None, None)
    row(name + ": copy-only kernels per layer", "<= 1", copies,
        None if copies is None else float(copies) <= 1)
    row(name + ": peak memory / (parameters, optimiser state, activations)", "<= 1.5", peak,
        None if peak is None else float(peak) <= 1.5)
    cnn = _grep(out_md, "results_cnn.txt", r"PyTorch/kiln ([0-9.]+)")
    cnn_batches = _grep(out_md, "results_cnn.txt", r"cnn epoch of ([0-9]+) batches")
    # A load above the cores slows PyTorch's spinning threads far more than
    # kiln (see cnn_section): such a run's ratio is shown but decides nothing.
    # The load at the start is the other work's; at the end it counts the
    # run's own threads too.
    load = _grep(out_md, "results_cnn.txt", r"load average ([0-9.]+)")
    busy = load is not None and float(load) > (os.cpu_count() or 1)
    got, met = None, None
    if cnn is not None:
        got = f"{cnn}x" + ("" if cnn_batches == "468" else f" (first {cnn_batches} batches)")
        if busy:
            got += " (load above the cores: not a measure)"
        else:
            met = float(cnn) >= 1.5
    row("Fashion-MNIST CNN epoch", ">= 1.5x PyTorch eager", got, met)
    sk = _grep(out_md, "results_overhead.txt", r"([0-9.]+) ms per kernel")
    row("1000 small independent kernels at one sync", "<= 5 ms per kernel cold",
        None if sk is None else f"{sk} ms", None if sk is None else float(sk) <= 5)
    cold = compile_ms.get(("mlp_train_step", "cold"))
    warm = compile_ms.get(("mlp_train_step", "warm_disk"))
    row("MLP training step, cold compile; new process on a warm disk", "<= 1 s; <= 50 ms",
        None if cold is None or warm is None else f"{cold:.0f} ms; {warm:.0f} ms",
        None if cold is None or warm is None else cold <= 1000 and warm <= 50)
    rec = _grep(out_md, "results_overhead.txt", r"record: ([0-9.]+) ns per op")
    rec_big = _grep(out_md, "results_overhead.txt", r"([0-9.]+) ns per op in a chain of 100000")
    row("recording an op (a 1000-op graph; a 100000-op chain)", "<= 200 ns",
        None if rec is None else f"{rec} ns; {rec_big} ns",
        None if rec is None else float(rec) <= 200 and float(rec_big) <= 200)
    fixed = _grep(out_md, "results_overhead.txt", r": (-?[0-9.]+) us \+")
    per = _grep(out_md, "results_overhead.txt", r"([0-9.]+) ns per graph node")
    per_op = _grep(out_md, "results_overhead.txt", r"us \+ ([0-9.]+) ns per op")
    row("a graph-cache hit", "<= 20 us + 50 ns per node",
        None if per is None else f"{fixed} us + {per} ns per node ({per_op} ns per op)",
        None if per is None else float(fixed) <= 20 and float(per) <= 50)
    out = ["## The CPU issue's goals", "",
           "Each goal of the CPU speed issue beside this run's figure (f32, 2 threads, ratios "
           "measured in the same run; a peer ratio above 1 means kiln is faster). *not measured*: "
           "no benchmark here measures it yet. The GPT-2 step's goal is against the step when "
           "the goal was set on another machine, so this run cannot say whether it is met.", ""]
    out += table(["workload", "goal", "this run", "met"], rows, ["l", "l", "r", "l"])
    missed = list(dict.fromkeys(r[0] for r in rows if r[3] == "**no**"))
    if missed:
        out += ["", "Why this run's misses miss (causes measured by profiling and by hand-edited "
                "variants of the generated kernels; see the closing notes of the CPU issue):", ""]
        if machine and machine.get("vector_bits", 512) < 512:
            out += [AVX2_NOTE, ""]
        for what in missed:
            cause = next((c for k, c in WHY_MISSED if what.startswith(k)), None)
            out.append(f"- {what}: {cause or 'no cause recorded yet.'}")
    return out + [""]


# Said before the causes where the run's machine has no 512-bit vectors: the
# causes were measured on AVX-512 machines.
AVX2_NOTE = (
    "This run's machine has 256-bit vectors (AVX2: the 2-core AMD EPYC, Zen 3, of "
    "2026-12-07), and the causes below were measured on AVX-512 machines (an Intel Xeon and "
    "a Zen 4 EPYC), where most of these rows were met. Here the FMA rate is about a third of "
    "the Xeon's (173 against 476-492 GFLOP/s on two threads) and the triad 21 GB/s against "
    "28, so compute-bound kernels (the 11-op chain, gelu, softmax's e^x pass, the products) "
    "fall further behind the memory, and gcc compiles and host code (recording, cache hits, "
    "cold compiles) run 2-3x slower. Measured on this machine on 2026-12-07: row softmax's "
    "sum pass was about 40 instructions per 8-lane vector (e^x with its range selects, the "
    "flush below 2^-126, the sum widened to double), compute-bound beside the memory; "
    "such sums of values never below zero (e^x, squares) now add each 256-element chunk in "
    "float lanes and the chunks in double (lower_plan.fsum): softmax 4096^2 15.8-17.5 -> "
    "12.9-13.6 ms and layer-norm 9.0-10.0 -> 7.6-8.5 ms alternating with 0df90fc (three runs "
    "each of bench/ops --quick), the LLVM path's softmax 16-18 -> 11-13 ms; "
    "the products' w^T packing had no AVX2 transpose (the 8x8 one added this session: "
    "256x768 @ w^T 18.5-21.7 -> 15.5-16.5 ms); column sums ran in chunks of 256 outputs, a "
    "kilobyte of each row (5.2-7.4 ms; chunks of 1024, 3.6-4.3 ms); the CNN's pool backward "
    "with its col2im (9 masked loads an element) took 8.8 ms of a 37 ms step through gcc's "
    "gathers, which its Zen 3 tuning turns on and which cost about a cycle a lane here: "
    "gcc is now told not to use them on such hosts (jit/cpu/compile.c, the step 38-43 -> "
    "27-31 ms). Its 6.3-6.7 ms left were its index arithmetic (divisions by 14, 196 and 3136 "
    "for each of its 4 + 9 loads, per element): columns kernels now walk their outputs in "
    "rows of the flat index's least divisor where it is 8 or more (lower_plan.rows, 256-bit "
    "vectors only), the divisions once per row, 6.7 -> 3.7-4.5 ms, and the pool backward's "
    "elementwise kernels take the output's rows of 28 (and 14) as their tile past the x / 2 "
    "that hid them, 2.6 -> 1.2-1.5 ms (and 1.5 -> 1.0-1.2): the step 31.0-33.1 -> "
    "28.4-30.2 ms (ea7a525 against this tree, alternating, 100 batches each). gcc "
    "still vectorises the rows' masked loads only with 64-bit index arithmetic (an int32 "
    "place sign-extended is not affine to its data-reference analysis); tried by hand on the "
    "col2im kernel: 3.5-4.1 -> 3.0-3.4 ms, within this machine's noise, not adopted.")

# The cause of each goal that runs have missed, keyed by the start of its row.
WHY_MISSED = [
    ("fused gelu", "on the Zen 3 EPYC (2026-12-07, later session) compute-bound: the "
     "kernel by hand on data in L1 takes 15-17 ns an 8-lane vector on one thread (84 vector "
     "instructions, 31 of them fma, a division), 16 ms of work at 16M on two threads "
     "against 12 of memory; its degree-10 polynomial evaluated as two halves in t^2 (half "
     "the latency) measured level. Before, on the AVX-512 machines: compute-bound until "
     "then: the erf form evaluated both of its "
     "branches (a Taylor series below |x| = 1, an erfc fit with its exponent two-summed "
     "above) for every element, about 100 operations; one fitted formula e^(-a^2) t P(t) now "
     "serves every x in about 50 (lower/rules_math.c)."),
    ("row softmax", "on the Zen 3 EPYC (2026-12-07, later session) the e^x pass was 56 "
     "instructions an 8-lane vector: e^x chose its two sides (the bias of its scale below "
     "and above zero) by two selects on x < 0, which gcc threaded into two copies of the "
     "reduction and polynomial per element, blended; the sides are now chosen by a mask of "
     "x's sign bit (lower/rules_math.c), and a float max or min against a literal that is "
     "not NaN (softmax's two clamps of x - max) is one compare and one select (jit/cstyle): "
     "10.7-13.4 -> 8.3-9.4 ms alternating (by hand on this kernel: the e^x pass is "
     "compute-bound, the max pass and the normalising one a tenth each of a profile). "
     "Before: three passes over each row: the max (from memory), e^x with the sum, "
     "the normalising; kiln_softmax now multiplies by each row's reciprocal (a division an "
     "element issued every 10 cycles), and the sum pass prefetches the next row, which the "
     "memory sat idle through before (plan.c: plan_prefetch). On the AVX2 machine "
     "(2026-12-07) the sum pass is compute-bound: its e^x is about 25 operations an 8-lane "
     "vector; its sum, widened to double (two conversions and two adds a vector), now adds in "
     "float chunks (a 1.12-1.2x gain). What is left above a copy's time (a scale of the same "
     "64 MB, 6.5-9 ms by hand) is e^x and the sum pass's store of e^x into the output (a "
     "write-allocate read of it), which the store pass reads back; kept in a scratch row and "
     "stored around the cache by hand: 12.6-14.5 -> 11.8-13.8 ms, inside the noise, not "
     "adopted."),
    ("the 11-op chain", "on the Zen 3 EPYC (2026-12-07, later session) compute-bound: "
     "the kernel by hand on data in L1 takes 22.5-24.5 ns an 8-lane vector on one thread "
     "(about 75 instructions, tanh then sigmoid on one dependency chain, two divisions), "
     "so 16M on two threads is 22 ms of work against 12 ms of memory. Its time is bound by "
     "how many of its instructions wait in the out-of-order window for the chain, not by "
     "their count: the loop split by hand in two (tanh's result through a tile buffer, "
     "the rest in a second loop) ran 24.5 -> 17.2 ns a vector in L1, but at 16M only "
     "28.4 -> 25.3 ms (not adopted: a split of fused loops at long chains is a pass still to "
     "write, and at 16M the first loop's loads then wait on memory). On the AVX-512 "
     "machines: compute and memory nearly level, so the figure moved around 80% with "
     "the load (79-84% in the last two sessions' runs): the kernel alone, on data in L1, takes "
     "13.8 ns a 16-element vector on one thread (7.2 ms of work per thread at 16M, about 60 "
     "vector operations and two divisions an element's vector), against 9.1 ms of memory at "
     "the triad's rate; run standalone at 16M it reaches 92% of the triad (10.4 ms). Two "
     "vectors interleaved per iteration (simdlen 32) measured level, so it is throughput, "
     "not latency, that bounds it. Earlier: cheaper e^x (no floor, no casts, a degree-6 fit) "
     "and sigmoid's e^-|x| without range selects took it from 15.4-16 to 12.3-13 ms."),
    ("sum of 64M", "met since 2026-12-07 (later session): the sum split across the threads "
     "read each thread's half as one stream, which on the Zen 3 EPYC did not keep the memory "
     "busy (a standalone float sum: one stream a thread 19-20 GB/s, four 29-32); each "
     "thread's share is now read as four streams at once (lower_plan.split_streams): "
     "11.8-12.5 -> 9.2-10.5 ms alternating, above the triad's rate (a read-only stream "
     "moves no write-allocate traffic, which the triad's 12 bytes an element leave out)."),
    ("column sums", "met since 2026-12-07 (later session): each pass over a chunk of "
     "outputs took one row, loading and storing each partial result per element read, one "
     "stream a thread; it now takes four rows a pass (lower_plan.column_step, where what a "
     "row's element computes is cheap): 4.5-5.4 -> 2.55-3.2 ms alternating, the same sums "
     "bit for bit."),
    ("layer-norm", "met in the runs of 2026-12-07's later session (72-78%); its passes are "
     "the mean and the centred squares' sum (both in float chunks) and the normalising "
     "store, at the memory's speed but for the row's two reads from cache."),
    ("a fused op into a fresh", "no page-fault storm is left (huge pages: 34 faults a step, "
     "not 16384); the rest is the kernel zeroing the 64 MB it hands out, a write stream more "
     "for a kernel that reads 64 MB and writes 64 MB (with write-allocate, about 4/3 of its "
     "traffic: the floor for fresh memory). A step's released output is reused by default "
     "(the reused column), which is what the goal's page faults were about. The ratio moves "
     "with the run (1.87 in the 2026-12-07 quick run, 1.35 and 1.38 rerun alone right after). "
     "Storing the kernel's output around the cache (non-temporal stores from a tile buffer on "
     "the stack) was measured and not adopted: a*b+c alone 9.1 -> 7.6 ms, but the 11-op "
     "chain 10.7 -> 11.7 ms, and an output the next kernel reads is slower streamed below "
     "32 MB."),
    ("conv2d 3x3 forward", "torch.compile calls oneDNN's direct convolution; kiln reads its "
     "im2col in place through the matmul micro-kernel, packing each image's panels of it "
     "first. This session the packing works out where the padding's zeros fall once per tap "
     "instead of once per row of the im2col (the kernel alone 2.44-2.46 -> 2.06-2.26 ms; "
     "bench/conv's forward, alternating with the session start, 3.11-3.37 -> 2.94-2.98 ms in "
     "one run and 2.72-2.73 -> 2.57-2.67 in a quieter one: 5-10%); the "
     "packing is still about 0.5 ms, 0.3 of which is only storing the panels (a variant that "
     "stores without loading), and the micro-kernel alone runs at about 73% of peak (1.7 ms, "
     "a variant that packs once). What is left is a micro-kernel that reads the input's rows "
     "in place, with no packing at all. The ratio flips between runs with the kernel unchanged "
     "(1.04x, then 0.92x on 2026-12-07 with the forward 2.33 -> 2.19 ms from the "
     "micro-kernel's unrolled k loop)."),
    ("attention forward", "the fused kernels' products run at about 85% of the FMA peak "
     "and take about half of a profile of the forward and backward; in the last session the "
     "products took 6-row register tiles (10 loads per 24 FMAs where 4 rows took 8 per 16), the forward "
     "takes a matrix's query blocks in one grab so that each matrix's k and v are packed once "
     "(both threads had packed every matrix), and the transposed packs (k in the forward, q and "
     "dO in the backward) go through an in-register transpose of 16 x 16 blocks instead of a "
     "strided store per element (0.8 of the forward's 6.4 ms): fwd+bwd 20.0-21.3 -> 15.5-16.5 "
     "ms alternating with the session start. The joined gradients' three cat-region copies "
     "(about 0.6 ms each, at half the memory's speed) and the online softmax remain. "
     "KILN_TUNE=1 takes fwd+bwd 1.09x further (its blocks timed; section KILN_TUNE below)."),
    ("transformer block forward+backward", "(1.32x two sessions ago, 1.05-1.17x in the last "
     "session's three runs with the same kernels: PyTorch's figure moves with the load.) Nine "
     "tenths of kiln's step are products (ten matmuls at 60-85% of the FMA peak one by one, and "
     "the fused attention); what remains is the matmul micro-kernel itself (register tiles 6x4, "
     "8x3 and 12x2 vectors measured level; unrolling its k loop 1-8 times measured level then, "
     "and 1.07-1.14x faster on 2026-12-07, see below). This "
     "session the qkv gradient, a sum of three pads that one kernel computed as three masked "
     "loads of permuted views per element (4.8 ms), became a cat of the three (autograd joins "
     "pads side by side; 1.0 ms): fwd+bwd 150-154 -> 145 ms alternating; now the attention "
     "kernels store that cat's thirds and the forward's permuted output themselves "
     "(lower/stores.c, 52 -> 48 kernels; level within this machine's noise: 143/146/151 ms "
     "against 146/151/140 alternating). The products are 114 of the ~140 ms at 68-72% of "
     "the FMA peak each; the largest other cost is the GELU derivative in the W1 product's "
     "epilogue (3.6 ms over the same product without it: it reads the pre-activation and the "
     "forward's output, 34 MB). With KILN_TUNE=1 "
     "the block's products take blocks timed on their shapes: fwd+bwd 1.07x faster than the "
     "heuristics' plans (section KILN_TUNE below), not enough for 1.5x. On 2026-12-07 the "
     "micro-kernel's k loop was unrolled by 4 (its loop overhead a tenth of the tile's "
     "instructions) and a B read as w^T (every kiln_linear's forward) packs through 16 x 16 "
     "in-register transposes (its scalar copy waited on 64 rows' lines at once: 28% of such a "
     "product's time): fwd+bwd 140 -> 126 ms alternating with the session start in the quick "
     "run, 1.26x PyTorch eager in the same run. The products now run at 75-88% of the peak "
     "one by one; a profile of a 1024 product on one thread is nine tenths micro-kernel. What "
     "the goal asks, in FLOPs: 1.5x that run's PyTorch eager (158.9 ms) is 105.9 ms for the "
     "step's 41.9 GFLOP, 395 GFLOP/s, 83% of the FMA peak over the whole step, elementwise "
     "work and attention included (kiln 333 GFLOP/s, 70%; PyTorch 264, 55%)."),
    ("Fashion-MNIST CNN", "a 12.4-13.8 ms step (from 16.2-16.6 last session): the products "
     "are batched per image and run at 140-180 GFLOP/s, their partial tiles now on "
     "micro-kernels of their own size and their plain results stored straight into the output; "
     "the second convolution's im2col is copied for its two readers (1.3 ms: rows of 14 as the "
     "kernel's tile, 2.2 ms before), the col2im under the max-pool's backward reads 9 masked "
     "taps per element (1.4 ms), and the ReLU and pool backward kernels run at the memory's "
     "speed. PyTorch's spinning OpenMP threads slow it most under load: only a run at a low load "
     "average measures the goal. Tried and measured worse: one product per layer over the "
     "folded batch (the col2im over that layout 1.9 -> 6.1 ms), the forward's im2col read in "
     "place as well as copied (1.7 -> 2.8 ms), rows as tiles for the pooling reductions and "
     "16-lane masked row loops, and (this session) the first convolution's weight gradient "
     "taken transposed so that its columns are the 16 channels instead of the 9 taps (0.76 -> "
     "0.96 ms). The im2col copy stays while the weight gradient reads it as a product's A, "
     "which only B reads in place. On 2026-12-07 the second convolution's input gradient was "
     "computed as a convolution (the flipped weight times windows of the padded output "
     "gradient, read in place as the forward's im2col) instead of a product 9x the input's "
     "size and its col2im: its product [16, 288] @ [288, 196] per image ran 2.86 ms against "
     "1.17 + 1.1 for the two it replaced, since with 16 output channels packing the 9x "
     "expansion costs more than the products it feeds (not adopted: only a direct convolution "
     "removes the expansion). This run (100 batches): kiln 10.4-11.4 ms a step, PyTorch "
     "14.1-14.8, at a load average of 1.2-1.6. On the Zen 3 EPYC (AVX2, 2026-12-07) the step "
     "was 34 ms, a fifth of it the pool backward's col2im and its where kernels walking their "
     "outputs flat (a division per coordinate per element): walked in rows (lower_plan.rows "
     "for the pooling reductions, rows of the output's last axis as the elementwise tile), "
     "31.0-33.1 -> 28.4-30.2 ms alternating with the tree before, 1.22x -> 1.37x PyTorch "
     "eager in the quick runs; the products (10 ms of the step, 32-43% of "
     "this machine's FMA peak at 6 x 2 tiles of 8 lanes) and the im2col copy (2.3 ms) are "
     "the rest."),
    ("recording an op", "on the Zen 3 EPYC (2026-12-07) this machine's host code runs in slow "
     "phases seconds long (the same 1000-op chain 190 or 340 ns an op, by phase), so the "
     "figure is the best of 1000 chains of 1000 ops (was 100) and of 10 of 100000 (was 5). "
     "That session every kiln_*_scalar's constant stopped costing two prototypes, hashes and "
     "table probes: graph_full keeps a memo of the eight constants broadcast last asked for, "
     "without references, a node leaving it when it dies (200-206 -> 124-130 ns, best of "
     "2000, alternating), a literal scalar is made in its operand's shape at once, and a "
     "broadcast is one view without the reshape's node between (graph_broadcast). Before, on "
     "AVX-512 machines: a node made from a source nothing was made from before skips the "
     "interning table (217-241 -> 134-169 ns along the chain); along a 100000-op chain the "
     "nodes and the 4 MB table no longer fit in cache, each new node missing on its slot."),
    ("a graph-cache hit", "measured on the Zen 3 EPYC (2026-12-07), whose slow phases move "
     "the median of 50 syncs between about 47 and 62 ns a node: a capture was a walk listing "
     "the pending nodes and three more passes numbering, describing and clearing them, and "
     "described each node by its op, shape and parameters, five cache lines of a 456-byte "
     "node, more than the second-level cache holds for a 3000-node graph (the capture of a "
     "1000-op chain took 126 us with its nodes in cache, 185 us just after recording). Now "
     "one walk lists and describes (graph_walk visits each node as it lists it, looking ahead "
     "along its stack), a node carries a 64-bit digest of its own structure made with its "
     "interning hash, nodes are 64-byte aligned with everything a capture reads in their "
     "first line: the capture 185 -> 118-136 us (61-68 in cache), the hit 229 -> 171 us "
     "median, alternating. What is left is the walk's chase from node to node, a miss each "
     "along a chain, and binding the 1000 scalars' buffers."),
    ("matmul, square", "the skinny 64x4096 @ 4096^2 (0.86x NumPy in the run before) packed "
     "B a panel of 16 columns at a time down 512 rows, a line from each row, rows 16 KiB apart "
     "sharing their cache sets so that the next panel's lines were evicted by then: 39% of "
     "the product was packing. Packed along the rows (each whole panel's next 8 steps in "
     "turn: jit/cpu/render_c.c mm_pack): 24.2-28.0 -> 18.7-19.2 ms alternating, 1.14x NumPy "
     "in the quick run after; the square shapes at 256-2048 are level with OpenBLAS within "
     "the run-to-run noise (0.91-1.06 in the same runs, the kernel unchanged). Before: "
     "met on 2026-12-07 (worst 1.15 at 2048) once the micro-kernel's k loop "
     "was unrolled by 4; before: OpenBLAS's SkylakeX kernel and kiln's were level at 1024 and 2048, "
     "and which is ahead moves with the run: the worst shape's ratio was 1.01, 1.04 and 0.94 in "
     "this session's last three quick runs, the kernel unchanged; kiln leads at 256 and "
     "the skinny shapes by 1.3-1.5x, at 512 by about 1.1. Until this session a quick run's median was of 3 steps, "
     "which for the 0.1 ms 256 product measured its first steps after the compile (0.19 ms: "
     "the threads waking) where forty steps measured 0.105 ms; every median is now over at "
     "least 50 ms of steps, kiln's and the peers' alike."),
    ("GPT-2 step: peak memory", "the new parameters are still written beside the old ones: "
     "the loss, read at the step's sync, keeps the forward graph and so the old parameters; "
     "the moments' buffers are donated (jit/donate.c), which took the 124M step from 1.71 to "
     "1.34."),
    ("GPT-2 step L12", "not comparable here: the tree of the day the goal was set has no "
     "such benchmark, and its API (kiln_item, kiln_adamw_new) differs from the one "
     "bench/gpt2.c is written against."),
    ("MLP training step, cold compile", "gcc's time on the step's 27 kernels, in two units "
     "compiled in parallel on the 2 cores; on the Zen 3 EPYC gcc runs 2-3x slower than on the "
     "AVX-512 machines where it was 745-785 ms. There (2026-12-07) 1808 -> 1223-1272 ms: the "
     "packing transposes were written with <immintrin.h> intrinsics, whose header took 0.65 s "
     "to parse in every unit (now the compiler's vector shuffles), and the products compile "
     "at -O2 (their vectors are written by hand; -O3 only slowed the compile: the 27 kernels "
     "2.1 s in one unit, 1.3-1.7 s with the 8 products at -O2). The 8 products are still "
     "about 0.2 s each; -O2 for every kernel would be 1.2 s in one unit, but the fused "
     "kernels' loops are vectorised by gcc only at -O3's cost model."),
    ("MLP training step", "noise in the quick run's 3 steps of a 1 ms step: its before/after "
     "table shows this tree 0.88x the session start's, where the step alone, alternating the "
     "two libraries in the same minutes (200 steps each, best), measured 0.840, 0.864, 0.839 ms "
     "(start) against 0.848, 0.849, 0.855 (this tree); the last session's run had 1.75x."),
    ("1000 small", "gcc's time on each kernel (the Philox generator inlined into each sum): "
     "cc1 is nine tenths of the sync's CPU time. Kernels of one text compile once since "
     "2026-12-07 (jit/cpu/compile.c, fold_twins: GPT-2's small step 208 kernels of 59 texts, "
     "its cold first step 10.8 -> 2.8 s, the L12 step's 32.7 -> 6.8 s): here about half the "
     "program's text folded (in a 100-sum dump, 1.38 MB of kernels held 0.74 MB of distinct "
     "text), 7.7-8.6 -> 5.6 ms a kernel; the rest differ in their sizes (rows of 2 to 101, "
     "columns of 3 to 12), which the text holds as literals. Reading those at run time "
     "(lower/sizes.c's machinery, as programs of one structure share code) would fold them "
     "into a few texts: not done."),
]


def main():
    directory, out_md, out_png = sys.argv[1:4]
    records = load(directory)
    # Each kiln program reports kiln's measurement of the machine; the best of these
    # is the least disturbed, and every percentage below is against it.
    machines = [r for r in records if r["suite"] == "machine"]
    machine = None
    if machines:
        machine = dict(max(machines, key=lambda r: r["triad_gbps"]))
        machine["fma_gflops"] = max(r["fma_gflops"] for r in machines)
    run = next((r for r in records if r["suite"] == "run"), {})
    ops = collections.defaultdict(dict)
    errors = []
    for r in records:
        if r["suite"] in ("ops", "nn"):
            if "error" in r:
                errors.append(r)
                if r["impl"] in ops[key(r)]:
                    continue
            ops[key(r)][r["impl"]] = r
    compile_times = collections.defaultdict(list)
    for r in records:
        if r["suite"] == "compile":
            if "error" in r:
                errors.append(r)
                continue
            compile_times[(key(r), r["impl"], r["metric"])].append(r["median_ms"])
    versions = {r["impl"]: r["version"] for r in records if r.get("version")}

    def ms(k, impl):
        r = ops[k].get(impl)
        return None if r is None or "error" in r else r["median_ms"]

    keys = sorted(ops, key=order)
    lines = ["# Benchmark results", ""]
    date = run.get("date") or datetime.date.today().isoformat()
    lines += [f"Measured on {date} with `bench/run.sh{' --quick' if run.get('quick') else ''}` "
              f"on {cpu_info()}. Generated by bench/report.py from the JSON lines in "
              f"bench/results/; do not edit by hand.", ""]
    if run.get("loadavg"):
        lines += [f"Load average when the run started: {run['loadavg']} (the machine is shared; "
                  "absolute times drift, so the figures that matter are the ratios).", ""]
    lines += [
        "**Conventions.** Every figure is the median of the timed steps after a warm-up step "
        "(which compiles). All data is f32. *eager/lazy* is kiln's eager time over its lazy "
        "time, measured in one process with the steps of the two modes interleaved. "
        "*peer/kiln* is the peer's time over kiln's lazy time, measured in separate processes "
        "run back to back: **above 1 means kiln is faster**, below 1 that the peer is. Every "
        "output is checked (kiln lazy against kiln eager; each peer against float64 NumPy on "
        "the same inputs) and the largest absolute difference is kept with the time.", ""]
    if machine:
        lines += ["## The machine's limits", "",
                  f"Measured by kiln in the same run as the figures below (kiln_machine_measure, jit/machine.c) on {machine['threads']} "
                  "threads: memory bandwidth by a STREAM-like triad `a[i] = b[i] + s*c[i]` over "
                  f"three arrays of {machine['triad_elems'] // 2**20}M floats (12 bytes counted "
                  "per element, best of several repetitions), and arithmetic peak by an FMA loop "
                  f"of 12 independent chains in {machine['vector_bits']}-bit vectors.", ""]
        lines += table(["limit", "measured"], [
            ["memory bandwidth (triad)", f"{machine['triad_gbps']:.1f} GB/s"],
            ["f32 FMA peak", f"{machine['fma_gflops']:.1f} GFLOP/s"]], ["l", "r"])
        lines += ["", "Memory-bound workloads are rated by the least traffic they need (each "
                  "input read once, the output written once) over their time; matmuls by "
                  "2·m·n·k over their time.", ""]

    lines += ["## kiln: lazy against eager", ""]
    rows = []
    for k in keys:
        lz, eg = ops[k].get("kiln-lazy"), ops[k].get("kiln-eager")
        if not lz or "error" in lz or not eg or "error" in eg:
            continue
        lim = "—"
        if machine and lz.get("gbps"):
            lim = f"{100 * lz['gbps'] / machine['triad_gbps']:.0f}% bw"
        elif machine and lz.get("gflops"):
            lim = f"{100 * lz['gflops'] / machine['fma_gflops']:.0f}% peak"
        rows.append([label(k), f"{lz.get('kernels', 0):.0f}", f"{eg.get('kernels', 0):.0f}",
                     fmt_ms(lz["median_ms"]), fmt_ms(eg["median_ms"]),
                     f"**{fmt_ratio(lz.get('eager_over_lazy'))}**", lim,
                     f"{lz.get('max_abs_diff', 0):.2g}"])
    lines += table(["workload", "lazy kernels", "eager kernels", "lazy ms", "eager ms",
                    "eager/lazy", "lazy, of limit", "max abs diff"], rows,
                   ["l", "r", "r", "r", "r", "r", "r", "r"])
    lines += [""]

    peers = [p for p in PEERS if any(p in ops[k] for k in keys)]
    lines += ["## kiln (lazy) against its peers: peer time / kiln time", ""]
    if versions:
        lines += ["Versions: " + ", ".join(f"{p} {versions[p]}" for p in peers if p in versions)
                  + ". Peers run with 2 threads; NumPy with its bundled OpenBLAS, "
                  "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset; PyTorch with its fused library "
                  "ops (softmax, layer_norm, gelu, addmm); torch.compile with Inductor's "
                  "defaults, static shapes; tinygrad on its CPU device, no TinyJit.", ""]
    rows, losses = [], []
    for k in keys:
        kiln = ms(k, "kiln-lazy")
        row = [label(k), fmt_ms(kiln)]
        for p in peers:
            pm = ms(k, p)
            ratio = pm / kiln if pm and kiln else None
            cell = fmt_ratio(ratio)
            if ratio is not None and ratio < 1:
                cell = f"*{cell}*"
                losses.append((ratio, k, p))
            if p in ops[k] and "error" in ops[k][p]:
                cell = "skipped" if ops[k][p]["error"].startswith("skipped") else "failed"
            row.append(cell)
        rows.append(row)
    lines += table(["workload", "kiln ms"] + peers, rows, ["l", "r"] + ["r"] * len(peers))
    lines += ["", "Ratios in *italics* are below 1: the peer is faster there.", ""]

    lines += ["## Share of the machine's limits", "",
              "GB/s (memory-bound workloads) or GFLOP/s (matmuls), as a percentage of the "
              "measured triad bandwidth or FMA peak.", ""]
    impls = ["kiln-lazy", "kiln-eager"] + peers
    rows = []
    for k in keys:
        row = [label(k)]
        for impl in impls:
            r = ops[k].get(impl)
            cell = "—"
            if r and "error" not in r and machine:
                if r.get("gbps"):
                    cell = f"{r['gbps']:.1f} GB/s ({100 * r['gbps'] / machine['triad_gbps']:.0f}%)"
                elif r.get("gflops"):
                    cell = (f"{r['gflops']:.1f} GFLOP/s "
                            f"({100 * r['gflops'] / machine['fma_gflops']:.0f}%)")
            row.append(cell)
        rows.append(row)
    lines += table(["workload"] + impls, rows, ["l"] + ["r"] * len(impls))
    lines += [""]

    if compile_times:
        lines += ["## Compile costs", "",
                  "Small graphs, so that compiling dominates: *cold* is the first step with an "
                  "empty cache directory; *warm_disk* the first step of a new process on the "
                  "cache the cold step filled; *repeat* a later step in the same process. kiln "
                  "compiles each program with the system C compiler (in eager mode one program "
                  "per op); torch.compile's cold step includes Dynamo's tracing and Inductor's "
                  "C++ compile; tinygrad's cache is its kernel database (it has no warm_disk "
                  "figure here). Milliseconds, median over processes or steps.", ""]
        gkeys = sorted({gk for gk, _, _ in compile_times})
        cimpls = [i for i in ["kiln-lazy", "kiln-eager", "torch.compile", "tinygrad"]
                  if any(ci == i for _, ci, _ in compile_times)]
        rows = []
        for gk in gkeys:
            for impl in cimpls:
                cells = []
                for metric in ["cold", "warm_disk", "repeat"]:
                    v = compile_times.get((gk, impl, metric))
                    cells.append(fmt_ms(statistics.median(v)) if v else "—")
                if any(c != "—" for c in cells):
                    rows.append([label(gk), impl] + cells)
        lines += table(["graph", "impl", "cold ms", "warm_disk ms", "repeat ms"], rows,
                       ["l", "l", "r", "r", "r"])
        lines += [""]

    base_dir = os.path.join(directory, "baseline")
    if os.path.isdir(base_dir):
        lines += baseline_section(base_dir, ops, keys)

    # kiln-lazy's median compile costs by (workload, metric), for the goals
    compile_ms = {(gk[0], metric): statistics.median(v)
                  for (gk, impl, metric), v in compile_times.items() if impl == "kiln-lazy"}
    lines += goals_section(ops, machine, out_md, compile_ms)
    lines += dist_section(out_md)
    lines += embedding_section(out_md)
    lines += gpt2_section(out_md)
    lines += dynamic_section(out_md)
    lines += conv_section(out_md)
    lines += overhead_section(out_md)
    lines += tune_section(out_md)
    lines += cuda_host_section(out_md)
    lines += cnn_section(out_md)

    lines += ["## Where kiln loses", ""]
    if losses:
        losses.sort()
        for ratio, k, p in losses:
            lines.append(f"- {label(k)}: {p} is {1 / ratio:.2f}x faster than kiln.")
    else:
        lines.append("- Nowhere in this run.")
    lazy_slower = [k for k in keys if ops[k].get("kiln-lazy", {}).get("eager_over_lazy", 2) < 0.95]
    for k in lazy_slower:
        lines.append(f"- {label(k)}: kiln's lazy mode is slower than its eager mode "
                     f"(eager/lazy {ops[k]['kiln-lazy']['eager_over_lazy']:.2f}).")
    lines += [""]
    if errors:
        lines += ["## Failures", ""]
        for r in errors:
            lines.append(f"- {r['impl']} {r['workload']} {r.get('shape', '')}: {r['error']}")
        lines += [""]
    lines += [f"![peer/kiln and eager/lazy ratios]({os.path.basename(out_png)})", ""]

    with open(out_md, "w") as f:
        f.write("\n".join(lines))
    plot(keys, ops, peers, out_png)


def plot(keys, ops, peers, out_png):
    series = [("kiln eager/lazy", lambda k: ops[k].get("kiln-lazy", {}).get("eager_over_lazy"))]
    for p in peers:
        def ratio(k, p=p):
            kr, pr = ops[k].get("kiln-lazy"), ops[k].get(p)
            if not kr or not pr or "error" in kr or "error" in pr:
                return None
            return pr["median_ms"] / kr["median_ms"]
        series.append((f"{p}/kiln", ratio))
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(keys) + 1.5))
    height = 0.8 / len(series)
    for i, (name, fn) in enumerate(series):
        ys, xs = [], []
        for j, k in enumerate(keys):
            v = fn(k)
            if v:
                ys.append(j + (i - (len(series) - 1) / 2) * height)
                xs.append(v)
        ax.barh(ys, xs, height=height, label=name)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([f"{w} {s}" for w, s in keys])
    ax.invert_yaxis()
    ax.set_xlabel("time ratio (log scale): right of 1, kiln lazy is faster")
    ax.set_title("kiln against eager mode and its peers")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)


if __name__ == "__main__":
    main()
