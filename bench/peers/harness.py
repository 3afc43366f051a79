"""What the peer benchmarks share: the workloads of bench/ops.c and
bench/compile_cost.c (same names, sizes and dtype), options, timing, and one
JSON line per measurement in the format kiln's programs print, so that
bench/report.py can put them side by side.

A peer module gives, per workload name, a function of the inputs (NumPy
float32 arrays converted by the peer's `convert`), `finish`, which makes sure
a result is computed (tinygrad is lazy), and `to_numpy`. Every
output is checked against a float64 NumPy computation of the same inputs, and
the largest difference is printed with the time: a broken kernel cannot make
a fast number unseen."""
import json
import statistics
import sys
import time

import numpy as np
from scipy.special import erf

M16 = 1 << 24
M64 = 1 << 26


def _mm(m, k, n):
    return 2.0 * m * k * n


# name, shape label, input shapes, bytes (least traffic), flops, tolerance
# relative to the largest reference magnitude, full-mode only.
OPS = [
    ("gelu_chain", "16M", [(M16,)] * 3, 16.0 * M16, 0, 1e-4, False),
    ("softmax_rows", "4096x4096", [(4096, 4096)], 8.0 * 4096 * 4096, 0, 1e-4, False),
    ("layer_norm_rows", "4096x4096", [(4096, 4096)], 8.0 * 4096 * 4096, 0, 1e-4, False),
    ("sum_all", "64M", [(M64,)], 4.0 * M64, 0, 1e-4, False),
    ("matmul", "256", [(256, 256)] * 2, 0, _mm(256, 256, 256), 1e-4, False),
    ("matmul", "512", [(512, 512)] * 2, 0, _mm(512, 512, 512), 1e-4, False),
    ("matmul", "1024", [(1024, 1024)] * 2, 0, _mm(1024, 1024, 1024), 1e-4, False),
    ("matmul", "2048", [(2048, 2048)] * 2, 0, _mm(2048, 2048, 2048), 1e-4, False),
    ("matmul", "4096", [(4096, 4096)] * 2, 0, _mm(4096, 4096, 4096), 1e-4, True),
    ("matmul", "4096x512@512x64", [(4096, 512), (512, 64)], 0, _mm(4096, 512, 64), 1e-4, False),
    ("matmul", "64x4096@4096x4096", [(64, 4096), (4096, 4096)], 0, _mm(64, 4096, 4096), 1e-4,
     False),
    ("matmul_bias_relu", "512", [(512, 512), (512, 512), (512,)], 0, _mm(512, 512, 512), 1e-4,
     False),
]

# The workloads of bench/nn.c: (name, shape, input shapes and scales, flops,
# tolerance). Weights are scaled by 1/sqrt(fan_in), as nn.c's are.
B, S, D, H, FF = 8, 256, 512, 8, 2048
NN = [
    ("conv2d_3x3", "8x64x32x32,64x64x3x3",
     [((8, 64, 32, 32), 1.0), ((64, 64, 3, 3), 1 / 24), ((64,), 1.0)],
     2.0 * 8 * 64 * 32 * 32 * 64 * 9, 1e-4),
    ("transformer_block_fwd", "b8,s256,d512,h8",
     [((B, S, D), 1.0), ((D,), 0.1), ((D,), 0.1), ((3 * D, D), 1 / 22.6), ((3 * D,), 0.1),
      ((D, D), 1 / 22.6), ((D,), 0.1), ((D,), 0.1), ((D,), 0.1), ((FF, D), 1 / 22.6),
      ((FF,), 0.1), ((D, FF), 1 / 45.3), ((D,), 0.1)],
     2.0 * B * S * D * (3 * D + D + 2 * FF) + 4.0 * B * H * S * S * (D // H), 1e-3),
    ("transformer_block_fwd_bwd", "b8,s256,d512,h8",
     [((B, S, D), 1.0), ((D,), 0.1), ((D,), 0.1), ((3 * D, D), 1 / 22.6), ((3 * D,), 0.1),
      ((D, D), 1 / 22.6), ((D,), 0.1), ((D,), 0.1), ((D,), 0.1), ((FF, D), 1 / 22.6),
      ((FF,), 0.1), ((D, FF), 1 / 45.3), ((D,), 0.1)],
     3 * (2.0 * B * S * D * (3 * D + D + 2 * FF) + 4.0 * B * H * S * S * (D // H)), 1e-3),
    ("attention_fwd", "b8,s256,d512,h8", [((B, H, S, D // H), 1.0)] * 3,
     4.0 * B * H * S * S * (D // H), 1e-4),
    ("attention_fwd_bwd", "b8,s256,d512,h8", [((B, H, S, D // H), 1.0)] * 4,
     3 * 4.0 * B * H * S * S * (D // H), 1e-4),
    ("mlp_train_step", "b128,784-256-128-10",
     [((128, 784), 1.0), ((256, 784), 1 / 28), ((256,), 0.01), ((128, 256), 1 / 16),
      ((128,), 0.01), ((10, 128), 1 / 11.3), ((10,), 0.01)],
     3 * 2.0 * 128 * (784 * 256 + 256 * 128 + 128 * 10), 1e-4)
]

# The graphs of bench/compile_cost.c, with their inputs.
COMPILE = [
    ("layer_norm_rows", "256x256", [(256, 256)]),
    ("mlp_softmax", "64x256x512x128", [(64, 256), (256, 512), (512,), (512, 128), (128,)]),
]


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(x):
    c = x - x.mean(axis=1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5)


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _conv3x3(x, w, b):
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True) + b[None, :, None, None]


def _ln_affine(x, w, b):
    c = x - x.mean(axis=-1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5) * w + b


def _block(x, l1w, l1b, wqkv, bqkv, wo, bo, l2w, l2b, w1, b1, w2, b2):
    qkv = _ln_affine(x, l1w, l1b) @ wqkv.T + bqkv
    q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(B, S, H, D // H).transpose(0, 2, 1, 3)
               for i in range(3))
    a = _softmax4(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)) @ v
    x2 = x + a.transpose(0, 2, 1, 3).reshape(B, S, D) @ wo.T + bo
    return x2 + _gelu(_ln_affine(x2, l2w, l2b) @ w1.T + b1) @ w2.T + b2


def _softmax4(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


REFERENCE = {
    "conv2d_3x3": _conv3x3,
    "transformer_block_fwd": _block,
    "attention_fwd": lambda q, k, v: _softmax4(q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // H)) @ v,
    "gelu_chain": lambda a, b, c: _gelu(a * b + c),
    "softmax_rows": _softmax,
    "layer_norm_rows": _layer_norm,
    "sum_all": lambda x: np.asarray(x.sum()),
    "matmul": lambda a, b: a @ b,
    "matmul_bias_relu": lambda a, b, bias: np.maximum(a @ b + bias, 0),
    "mlp_softmax": lambda x, w1, b1, w2, b2: _softmax(_gelu(x @ w1 + b1) @ w2 + b2),
}


_START = time.monotonic()


def over_budget(argv):
    """--budget SECONDS: past it, the remaining workloads are reported as
    skipped instead of run, so that a quick run ends in its time whatever a
    peer's compiler costs on a loaded machine."""
    if "--budget" not in argv:
        return False
    return time.monotonic() - _START > float(argv[argv.index("--budget") + 1])


def options(argv):
    quick = "--quick" in argv
    full = "--full" in argv and not quick
    steps = 3 if quick else 9
    if "--steps" in argv:
        steps = max(1, int(argv[argv.index("--steps") + 1]))
    return quick, full, steps


# A step's median is taken over at least MIN_SECONDS of steps (up to MAX_STEPS),
# as kiln's runner takes its own (bench/bench.h): three steps of a 0.1 ms
# product are its first ones, not its steady state.
MIN_SECONDS = 0.05
MAX_STEPS = 200


def timed_steps(fn, args, finish, steps):
    """The times of at least steps calls of fn (more while they sum to under
    MIN_SECONDS), and the last call's output."""
    times = []
    while len(times) < steps or (len(times) < MAX_STEPS and sum(times) < MIN_SECONDS):
        t0 = time.perf_counter()
        out = finish(fn(*args))
        times.append(time.perf_counter() - t0)
    return times, out


def emit(record):
    print(json.dumps(record), flush=True)
    extra = f"  {record['error']}" if "error" in record else \
        f"{record['median_ms']:10.3f} ms  diff {record.get('max_abs_diff', 0):.2g}"
    print(f"{record['suite']:8} {record['workload']:22} {record.get('shape', ''):18} "
          f"{record['impl']:13} {extra}", file=sys.stderr)


def inputs(shapes, seed=100):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in shapes]


def max_diff(out, ref):
    out = np.asarray(out, dtype=np.float64).reshape(np.shape(ref))
    return float(np.max(np.abs(out - ref))), float(max(1.0, np.max(np.abs(ref))))


def run_ops(impl, fns, convert, finish, to_numpy, argv, version, wrap=None):
    """Times every workload of OPS that fns has, each through wrap(fn) when
    wrap is given (first_ms is then the first call's time, compile included);
    returns the exit status."""
    quick, full, steps = options(argv)
    status = 0
    for name, shape, in_shapes, nbytes, flops, tol, full_only in OPS:
        if full_only and not full:
            continue
        base = {"suite": "ops", "workload": name, "impl": impl, "shape": shape, "dtype": "f32",
                "version": version}
        if name not in fns:
            continue
        if over_budget(argv):
            emit({**base, "error": "skipped: time budget spent"})
            continue
        host = inputs(in_shapes)
        args = [convert(a) for a in host]
        try:
            fn = wrap(fns[name]) if wrap else fns[name]
            t0 = time.perf_counter()
            finish(fn(*args))
            first = time.perf_counter() - t0
            times, out = timed_steps(fn, args, finish, steps)
        except Exception as e:  # a peer that cannot run a workload is reported, not fatal
            emit({**base, "error": f"{type(e).__name__}: {e}"[:300]})
            status = 1
            continue
        ref_fn = REFERENCE.get(name) or (reference or {}).get(name)
        if ref_fn is None:
            emit({**base, "error": "no float64 reference for this workload"})
            status = 1
            continue
        ref = ref_fn(*[a.astype(np.float64) for a in host])
        diff, scale = max_diff(to_numpy(out), ref)
        med = statistics.median(times)
        rec = {**base, "median_ms": med * 1e3, "min_ms": min(times) * 1e3, "steps": len(times),
               "first_ms": first * 1e3, "max_abs_diff": diff}
        if nbytes:
            rec.update(bytes=nbytes, gbps=nbytes / med * 1e-9)
        if flops:
            rec.update(flops=flops, gflops=flops / med * 1e-9)
        if not diff <= tol * scale:
            rec["error"] = f"result differs from float64 NumPy by {diff:g} (largest {scale:g})"
            status = 1
        emit(rec)
    return status


def run_nn(impl, fns, convert, finish, to_numpy, argv, version, wrap=None, reference=None):
    """The workloads of NN, as run_ops does those of OPS. Training workloads
    have no NumPy reference; the peer passes its own float64 one."""
    _, _, steps = options(argv)
    status = 0
    for name, shape, in_specs, flops, tol in NN:
        if name not in fns:
            continue
        base = {"suite": "nn", "workload": name, "impl": impl, "shape": shape, "dtype": "f32",
                "version": version}
        if over_budget(argv):
            emit({**base, "error": "skipped: time budget spent"})
            continue
        host = [a * np.float32(scale) for a, (_, scale) in
                zip(inputs([s for s, _ in in_specs], seed=10), in_specs)]
        args = [convert(a) for a in host]
        try:
            fn = wrap(fns[name]) if wrap else fns[name]
            t0 = time.perf_counter()
            finish(fn(*args))
            first = time.perf_counter() - t0
            times, out = timed_steps(fn, args, finish, steps)
        except Exception as e:  # reported, not fatal
            emit({**base, "error": f"{type(e).__name__}: {e}"[:300]})
            status = 1
            continue
        ref_fn = REFERENCE.get(name) or (reference or {}).get(name)
        if ref_fn is None:
            emit({**base, "error": "no float64 reference for this workload"})
            status = 1
            continue
        ref = ref_fn(*[a.astype(np.float64) for a in host])
        diff, scale = max_diff(to_numpy(out), ref)
        med = statistics.median(times)
        rec = {**base, "median_ms": med * 1e3, "min_ms": min(times) * 1e3, "steps": len(times),
               "first_ms": first * 1e3, "max_abs_diff": diff, "flops": flops,
               "gflops": flops / med * 1e-9}
        if not diff <= tol * scale:
            rec["error"] = f"result differs from float64 NumPy by {diff:g} (largest {scale:g})"
            status = 1
        emit(rec)
    return status


def time_compile_graph(impl, name, shape, fn, convert, finish, metric, steps=1):
    """Times steps calls of fn on the graph's inputs as one measurement."""
    in_shapes = dict((n, s) for n, _, s in COMPILE)[name]
    args = [convert(a) for a in inputs(in_shapes, seed=1)]
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        finish(fn(*args))
        times.append(time.perf_counter() - t0)
    emit({"suite": "compile", "workload": name, "impl": impl, "shape": shape, "dtype": "f32",
          "metric": metric, "median_ms": statistics.median(times) * 1e3,
          "min_ms": min(times) * 1e3, "steps": steps})
