"""The workloads of bench/ops.c in PyTorch on the CPU, same sizes and dtype,
eager (impl "torch") or through torch.compile's default Inductor backend
(--compile, impl "torch.compile"), with PyTorch's fused library ops where it
has them (softmax, layer_norm, gelu, addmm). With --compile it also measures
bench/compile_cost.c's graphs: the first call with an empty Inductor cache
(cold), the first call of a new process on the cache that filled (warm_disk:
this script run again with --child), and later calls (repeat).
With --device cuda the same workloads run on the GPU (inputs copied there
first, each call waited for with torch.cuda.synchronize, TF32 off as in
PyTorch's default for matmul), for bench/gpu_check.sh.
Usage: torch_peer.py [--compile] [--quick | --full] [--steps N] [--device cpu|cuda]."""
import os
import subprocess
import sys
import tempfile

COMPILE = "--compile" in sys.argv
CHILD = "--child" in sys.argv
DEVICE = sys.argv[sys.argv.index("--device") + 1] if "--device" in sys.argv else "cpu"
# Inductor's caches live under this directory and the variable is read when
# torch is imported: an empty one makes the first call compile from scratch.
if COMPILE and not CHILD:
    _cache = tempfile.TemporaryDirectory(prefix="bench-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _cache.name

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import harness  # noqa: E402

torch.set_num_threads(int(os.environ.get("BENCH_THREADS") or os.cpu_count()))
torch.set_grad_enabled(False)

FNS = {
    "gelu_chain": lambda a, b, c: F.gelu(a * b + c),
    "softmax_rows": lambda x: torch.softmax(x, dim=1),
    "layer_norm_rows": lambda x: F.layer_norm(x, x.shape[1:], eps=1e-5),
    "sum_all": lambda x: x.sum(),
    "matmul": lambda a, b: a @ b,
    "matmul_bias_relu": lambda a, b, bias: torch.relu(torch.addmm(bias, a, b)),
}

def split_heads(t):
    return t.reshape(8, 256, 8, 64).transpose(1, 2)


def block(x, l1w, l1b, wqkv, bqkv, wo, bo, l2w, l2b, w1, b1, w2, b2):
    q, k, v = F.linear(F.layer_norm(x, (512,), l1w, l1b, 1e-5), wqkv, bqkv).split(512, dim=2)
    a = F.scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v))
    x2 = x + F.linear(a.transpose(1, 2).reshape(8, 256, 512), wo, bo)
    return x2 + F.linear(F.gelu(F.linear(F.layer_norm(x2, (512,), l2w, l2b, 1e-5), w1, b1)),
                         w2, b2)


def block_grad(*args):
    """The gradients of the block's summed output, flattened and joined."""
    with torch.enable_grad():
        ps = [a.detach().requires_grad_(True) for a in args]
        g = torch.autograd.grad(block(*ps).sum(), ps)
    return torch.cat([t.reshape(-1) for t in g])


def attention_grad(q, k, v, w):
    """The gradients of sum(sdpa(q, k, v) * w) for q, k and v, flattened and joined."""
    with torch.enable_grad():
        ps = [a.detach().requires_grad_(True) for a in (q, k, v)]
        g = torch.autograd.grad((F.scaled_dot_product_attention(*ps) * w).sum(), ps)
    return torch.cat([t.reshape(-1) for t in g])


def mlp_train_step(x, *params):
    """One SGD step of the 784-256-128-10 MLP; the updated parameters, joined."""
    with torch.enable_grad():
        ps = [p.detach().requires_grad_(True) for p in params]
        h = F.relu(F.linear(F.relu(F.linear(x, ps[0], ps[1])), ps[2], ps[3]))
        labels = (torch.arange(x.shape[0], device=x.device) * 7 + 3) % 10
        loss = F.cross_entropy(F.linear(h, ps[4], ps[5]), labels)
        g = torch.autograd.grad(loss, ps)
    return torch.cat([(p - 0.05 * d).detach().reshape(-1) for p, d in zip(ps, g)])


NN = {
    "conv2d_3x3": lambda x, w, b: F.conv2d(x, w, b, padding=1),
    "transformer_block_fwd": block,
    "transformer_block_fwd_bwd": block_grad,
    "attention_fwd": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    "attention_fwd_bwd": attention_grad,
    "mlp_train_step": mlp_train_step,
}

# float64 references for the training workloads, which NumPy has none of
TRAIN_REFERENCE = {
    name: (lambda fn: lambda *a: fn(*[torch.from_numpy(x) for x in a]).detach().numpy())(fn)
    for name, fn in (("transformer_block_fwd_bwd", block_grad), ("attention_fwd_bwd", attention_grad),
                     ("mlp_train_step", mlp_train_step))
}

GRAPHS = {
    "layer_norm_rows": FNS["layer_norm_rows"],
    "mlp_softmax": lambda x, w1, b1, w2, b2:
        torch.softmax(torch.addmm(b2, F.gelu(torch.addmm(b1, x, w1)), w2), dim=1),
}


def convert(a):
    return torch.from_numpy(a).to(DEVICE)


def same(t):
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return t


def to_numpy(t):
    return t.detach().cpu().numpy()


def fresh_compile(fn):
    """Each workload compiled on its own, for its own static shapes: without
    the reset, a second matmul size would recompile the same function as a
    dynamic-shape graph."""
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def compile_costs(steps, quick):
    for name, shape, _ in harness.COMPILE:
        if harness.over_budget(sys.argv):
            break
        fn = fresh_compile(GRAPHS[name])
        harness.time_compile_graph("torch.compile", name, shape, fn, convert, same, "cold")
        for _ in range(1 if quick else 3):
            subprocess.run([sys.executable, __file__, "--compile", "--child", name], check=True)
        harness.time_compile_graph("torch.compile", name, shape, fn, convert, same, "repeat",
                                   steps)


def main():
    if CHILD:
        name = sys.argv[sys.argv.index("--child") + 1]
        shape = dict((n, s) for n, s, _ in harness.COMPILE)[name]
        harness.time_compile_graph("torch.compile", name, shape, fresh_compile(GRAPHS[name]),
                                   convert, same, "warm_disk")
        return
    quick, _, steps = harness.options(sys.argv)
    if COMPILE:
        compile_costs(steps, quick)
        status = harness.run_ops("torch.compile", FNS, convert, same, to_numpy, sys.argv,
                                 torch.__version__, wrap=fresh_compile)
        status |= harness.run_nn("torch.compile", NN, convert, same, to_numpy, sys.argv,
                                 torch.__version__, wrap=fresh_compile,
                                 reference=TRAIN_REFERENCE)
    else:
        status = harness.run_ops("torch", FNS, convert, same, to_numpy, sys.argv,
                                 torch.__version__)
        status |= harness.run_nn("torch", NN, convert, same, to_numpy, sys.argv,
                                 torch.__version__, reference=TRAIN_REFERENCE)
    sys.exit(status)

if __name__ == "__main__":
    main()
