"""The workloads of bench/ops.c in tinygrad on its CPU device, same sizes and
dtype, and the first step of bench/compile_cost.c's graphs with an empty
kernel cache. Usage: tinygrad_peer.py [--quick | --full] [--steps N]; JSON
lines on stdout. Each step schedules its graph afresh (no TinyJit), as each
step of kiln's does."""
import os
import sys
import tempfile

# An empty kernel cache, so that the first step of a graph compiles; the
# variable is read when tinygrad is imported.
_cache = tempfile.TemporaryDirectory(prefix="bench-tinygrad-")
os.environ["CACHEDB"] = os.path.join(_cache.name, "cache.db")

import tinygrad  # noqa: E402
from tinygrad import Tensor  # noqa: E402

import harness  # noqa: E402


def layer_norm_rows(x):
    return x.layernorm(axis=1, eps=1e-5)


FNS = {
    "gelu_chain": lambda a, b, c: (a * b + c).gelu(approximate="none"),
    "softmax_rows": lambda x: x.softmax(axis=1),
    "layer_norm_rows": layer_norm_rows,
    "sum_all": lambda x: x.sum(),
    "matmul": lambda a, b: a @ b,
    "matmul_bias_relu": lambda a, b, bias: (a @ b + bias).relu(),
}

def linear(x, w, b):
    return x @ w.T + b


def split_heads(t):
    return t.reshape(8, 256, 8, 64).transpose(1, 2)


def block(x, l1w, l1b, wqkv, bqkv, wo, bo, l2w, l2b, w1, b1, w2, b2):
    qkv = linear(x.layernorm(axis=-1, eps=1e-5) * l1w + l1b, wqkv, bqkv)
    q, k, v = (split_heads(qkv[:, :, i * 512:(i + 1) * 512]) for i in range(3))
    a = q.scaled_dot_product_attention(k, v)
    x2 = x + linear(a.transpose(1, 2).reshape(8, 256, 512), wo, bo)
    h = linear(x2.layernorm(axis=-1, eps=1e-5) * l2w + l2b, w1, b1).gelu(approximate="none")
    return x2 + linear(h, w2, b2)


NN = {
    "conv2d_3x3": lambda x, w, b: x.conv2d(w, b, padding=1),
    "transformer_block_fwd": block,
}

GRAPHS = {
    "layer_norm_rows": layer_norm_rows,
    "mlp_softmax": lambda x, w1, b1, w2, b2:
        ((x @ w1 + b1).gelu(approximate="none") @ w2 + b2).softmax(axis=1),
}


def main():
    convert = lambda a: Tensor(a).realize()  # noqa: E731
    finish = lambda t: t.realize()  # noqa: E731
    to_numpy = lambda t: t.numpy()  # noqa: E731
    quick, _, steps = harness.options(sys.argv)
    version = getattr(tinygrad, "__version__", "")
    for name, shape, _ in harness.COMPILE:
        if harness.over_budget(sys.argv):
            break
        harness.time_compile_graph("tinygrad", name, shape, GRAPHS[name], convert, finish, "cold")
        harness.time_compile_graph("tinygrad", name, shape, GRAPHS[name], convert, finish,
                                   "repeat", steps)
    status = harness.run_ops("tinygrad", FNS, convert, finish, to_numpy, sys.argv, version)
    status |= harness.run_nn("tinygrad", NN, convert, finish, to_numpy, sys.argv, version)
    sys.exit(status)


if __name__ == "__main__":
    main()
