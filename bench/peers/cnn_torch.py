"""bench/cnn_epoch.c's epoch in PyTorch eager: examples/fashion_mnist.c's CNN
(conv 3x3 1->16 pad 1, ReLU, max-pool 2, conv 3x3 16->32 pad 1, ReLU, max-pool
2, linear 32*7*7->10) with PyTorch's default initialisation (the same
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) kiln's program draws from), mean
cross-entropy, AdamW (lr 3e-3, betas 0.9 and 0.999, eps 1e-8, weight decay
1e-2) under the same cosine schedule, f32, batches of 128 normalised images in
the same order (the example's shuffle, ported below), the epoch's 468 full
batches or the first --batches N. Gathering and normalising a batch is part of
each step, as in kiln's program. Step 1 is not timed; steps 2..N are.
torch.set_num_threads(BENCH_THREADS, else every CPU).

Usage: cnn_torch.py [--batches N] [--data DIR]. One line on stdout, in
cnn_epoch.c's format."""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SIDE, CLASSES, BATCH, C1, C2 = 28, 10, 128, 16, 32
LR, WEIGHT_DECAY = 3e-3, 1e-2
PIXEL_MEAN, PIXEL_STD = 0.2860, 0.3530
TAIL = 20  # the loss reported at the end is the mean of the last TAIL steps'


def read_idx(path, ndim):
    """An IDX file of unsigned bytes (plain or gzip-compressed) as an array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08 or data[3] != ndim:
        sys.exit(f"cnn_torch: {path}: not an IDX file of unsigned bytes in {ndim} dimensions")
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(dims):
        sys.exit(f"cnn_torch: {path}: {body.size} bytes of data, its header says {dims}")
    return body.reshape(dims)


def shuffle(n, seed):
    """The example's fixed-seed Fisher-Yates shuffle of range(n) (a 64-bit LCG)."""
    mask = (1 << 64) - 1
    idx = list(range(n))
    s = (seed * 0x9E3779B97F4A7C15 + 1) & mask
    for i in range(n - 1, 0, -1):
        s = (s * 6364136223846793005 + 1442695040888963407) & mask
        j = ((s >> 32) * (i + 1)) >> 32
        idx[i], idx[j] = idx[j], idx[i]
    return np.array(idx, dtype=np.int64)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, C1, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(C1, C2, 3, padding=1)
        self.fc = torch.nn.Linear(C2 * 7 * 7, CLASSES)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc(h.flatten(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=0)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS") or os.cpu_count()))
    torch.manual_seed(0)

    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"), 3)
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"), 1)
    n = images.shape[0]
    epoch_steps = n // BATCH
    if args.batches and not 2 <= args.batches <= epoch_steps:
        sys.exit(f"cnn_torch: --batches wants 2 to {epoch_steps}")
    steps = args.batches or epoch_steps
    order = shuffle(n, 1)  # the example's first epoch
    images_t = torch.from_numpy(images.copy())
    labels_t = torch.from_numpy(labels.astype(np.int64))

    model = CNN()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=WEIGHT_DECAY)
    first_step, first_loss, tail, t_warm = 0.0, 0.0, 0.0, 0.0
    for s in range(steps):
        if s == 1:
            t_warm = time.perf_counter()
        t0 = time.perf_counter()
        idx = torch.from_numpy(order[s * BATCH:(s + 1) * BATCH])
        x = images_t[idx].float().div_(255).sub_(PIXEL_MEAN).div_(PIXEL_STD)
        x = x.reshape(BATCH, 1, SIDE, SIDE)
        y = labels_t[idx]
        # kiln_lr_cosine(LR, s, steps, 0)
        for g in opt.param_groups:
            g["lr"] = LR * 0.5 * (1 + math.cos(math.pi * s / steps))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        l = loss.item()  # as kiln's step ends by reading its loss
        if s == 0:
            first_step, first_loss = time.perf_counter() - t0, l
        if s >= steps - TAIL:
            tail += l
    warm = time.perf_counter() - t_warm
    warm_steps = steps - 1
    print(f"cnn_epoch torch {torch.__version__}: {steps} batches of {BATCH}, first step "
          f"{first_step:.2f} s, {warm_steps} warm steps {warm:.2f} s: "
          f"{1e3 * warm / warm_steps:.2f} ms/step, {warm_steps * BATCH / warm:.0f} img/s, "
          f"warm epoch {warm / warm_steps * steps:.2f} s, "
          f"loss {first_loss:.3f} -> {tail / min(steps, TAIL):.3f}", flush=True)


if __name__ == "__main__":
    main()
