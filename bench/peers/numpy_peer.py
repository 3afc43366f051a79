"""The workloads of bench/lazy_vs_eager.c in NumPy (erf from SciPy), same
sizes and dtype, so that kiln's times can be put beside a peer's. Prints one
line per workload: name, then the median milliseconds per step."""
import sys
import time

import numpy as np
from scipy.special import erf


def gelu_chain(a, b, c):
    x = a * b + c
    return 0.5 * x * (1.0 + erf(x * np.float32(0.7071067811865476)))


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_rows(x):
    c = x - x.mean(axis=1, keepdims=True)
    var = (c * c).mean(axis=1, keepdims=True)
    return c / np.sqrt(var + np.float32(1e-5))


def sum_all(x):
    return x.sum()


def matmul_bias_relu(a, b, bias):
    return np.maximum(a @ b + bias[0:1], 0)


WORKLOADS = [
    ("gelu(a*b+c), 16M f32", 3, (1 << 24,), gelu_chain),
    ("softmax rows, 4096x4096 f32", 1, (4096, 4096), softmax_rows),
    ("layer-norm rows, 4096x4096 f32", 1, (4096, 4096), layer_norm_rows),
    ("sum, 16M f32", 1, (1 << 24,), sum_all),
    ("relu(a@b + bias), 512x512x512 f32", 3, (512, 512), matmul_bias_relu),
]


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rng = np.random.default_rng(100)
    for name, nin, shape, fn in WORKLOADS:
        args = [rng.standard_normal(shape, dtype=np.float32) for _ in range(nin)]
        fn(*args)
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
        times.sort()
        print(f"{name}\t{times[len(times) // 2] * 1e3:.3f}")


if __name__ == "__main__":
    main()
