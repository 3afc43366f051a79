"""The workloads of bench/ops.c in NumPy (erf from SciPy), same sizes and
dtype. Usage: numpy_peer.py [--quick | --full] [--steps N]; JSON lines on
stdout. NumPy has no compiler, so it has no compile measurements."""
import sys

import numpy as np
from scipy.special import erf

import harness


def gelu_chain(a, b, c):
    x = a * b + c
    return np.float32(0.5) * x * (np.float32(1.0) + erf(x * np.float32(0.7071067811865476)))


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_rows(x):
    c = x - x.mean(axis=1, keepdims=True)
    var = (c * c).mean(axis=1, keepdims=True)
    return c / np.sqrt(var + np.float32(1e-5))


FNS = {
    "gelu_chain": gelu_chain,
    "softmax_rows": softmax_rows,
    "layer_norm_rows": layer_norm_rows,
    "sum_all": lambda x: x.sum(),
    "matmul": lambda a, b: a @ b,
    "matmul_bias_relu": lambda a, b, bias: np.maximum(a @ b + bias, np.float32(0)),
}


def main():
    same = lambda x: x  # noqa: E731
    sys.exit(harness.run_ops("numpy", FNS, same, same, same, sys.argv, np.__version__))


if __name__ == "__main__":
    main()
