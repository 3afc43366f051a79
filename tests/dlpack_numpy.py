#!/usr/bin/env python3
"""dlpack_numpy.py -- kiln's DLPack exchange checked against NumPy's.

    python3 tests/dlpack_numpy.py PATH/TO/libkiln.so

Loads libkiln.so with ctypes and hands tensors both ways through the DLPack
capsule protocol, as a C extension would:
- kiln to NumPy: kiln_to_dlpack's DLManagedTensor in a "dltensor" capsule
  behind __dlpack__, read by numpy.from_dlpack; the array stays valid after
  kiln has released its handle and freed its context, and dropping the
  array calls kiln's deleter
  (checked, with the sanitizers, by the C tests; here the values must
  survive kiln_ctx_free);
- NumPy to kiln: an array's own capsule handed to kiln_from_dlpack, which
  takes ownership (the capsule is renamed "used_dltensor", as the protocol
  says); NumPy's deleter drops its reference to the array exactly once,
  which sys.getrefcount shows: before kiln_from_dlpack returns when kiln
  copied, when the kiln tensor is released when it kept the memory.
Every dtype both sides have, 0-d and empty tensors, strided and transposed
NumPy views (kiln gathers them), fresh random values each run. Prints one
line per check and exits non-zero on the first failure.
"""
import ctypes
import gc
import sys

import numpy as np

KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I32, KILN_I64, KILN_U8, KILN_BOOL, KILN_I8 = range(9)
KILN_CPU, KILN_REF = 1, 3
DTYPES = [
    (KILN_F32, np.float32),
    (KILN_F64, np.float64),
    (KILN_F16, np.float16),
    (KILN_I32, np.int32),
    (KILN_I64, np.int64),
    (KILN_U8, np.uint8),
    (KILN_I8, np.int8),
]
# NumPy exchanges bool (kDLBool) from 1.25 on; Debian 12's is 1.24.
NUMPY_BOOL = tuple(int(x) for x in np.__version__.split(".")[:2]) >= (1, 25)
if NUMPY_BOOL:
    DTYPES.append((KILN_BOOL, np.bool_))

py = ctypes.pythonapi
py.PyCapsule_New.restype = ctypes.py_object
py.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
py.PyCapsule_GetPointer.restype = ctypes.c_void_p
py.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
py.PyCapsule_SetName.restype = ctypes.c_int
py.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


def load(path):
    k = ctypes.CDLL(path)
    p, i32, i64, dbl = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_double
    sigs = {
        "kiln_ctx_new": (p, [i32]),
        "kiln_ctx_free": (None, [p]),
        "kiln_ctx_last_error": (ctypes.c_char_p, [p]),
        "kiln_from_data": (p, [p, i32, i32, ctypes.POINTER(i64), p]),
        "kiln_mul_scalar": (p, [p, dbl]),
        "kiln_to_dlpack": (i32, [p, ctypes.POINTER(p)]),
        "kiln_from_dlpack": (p, [p, p]),
        "kiln_to_host": (i32, [p, p, ctypes.c_size_t]),
        "kiln_error": (i32, [p]),
        "kiln_error_message": (ctypes.c_char_p, [p]),
        "kiln_release": (None, [p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(k, name)
        f.restype, f.argtypes = res, args
    return k


def fail(what):
    print("FAIL:", what)
    sys.exit(1)


def check(cond, what):
    if not cond:
        fail(what)


class Exported:
    """What numpy.from_dlpack reads: a producer with __dlpack__."""

    def __init__(self, managed):
        self.capsule = py.PyCapsule_New(managed, b"dltensor", None)

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU


def random_array(rng, npdt, shape):
    if npdt == np.bool_:
        x = rng.random(shape) < 0.5
    elif np.issubdtype(npdt, np.integer):
        info = np.iinfo(npdt)
        x = rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=npdt)
    else:
        x = rng.standard_normal(shape) * 10
    return np.array(x, dtype=npdt).reshape(shape)  # an array even when 0-d


def kiln_read(k, t, npdt, shape):
    out = np.empty(shape, dtype=npdt)
    st = k.kiln_to_host(t, out.ctypes.data, out.nbytes)
    check(st == 0, "kiln_to_host: %s" % k.kiln_error_message(t))
    return out


def kiln_tensor(k, ctx, kdt, arr):
    arr = arr.copy(order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    dims = (ctypes.c_int64 * max(arr.ndim, 1))(*arr.shape)
    t = k.kiln_from_data(ctx, kdt, arr.ndim, dims, arr.ctypes.data)
    check(t and k.kiln_error(t) == 0, "kiln_from_data")
    return t


def kiln_to_numpy(k, dev, rng):
    for kdt, npdt in DTYPES:
        for shape in [(5, 7), (), (0, 3), (2, 3, 4)]:
            ctx = k.kiln_ctx_new(dev)
            want = random_array(rng, npdt, shape)
            t = kiln_tensor(k, ctx, kdt, want)
            if kdt in (KILN_F32, KILN_F64) and dev == KILN_CPU and shape == (5, 7):
                # a computed tensor, not only a leaf
                t2 = k.kiln_mul_scalar(t, 3.0)
                k.kiln_release(t)
                t, want = t2, want * npdt(3)
            m = ctypes.c_void_p()
            st = k.kiln_to_dlpack(t, ctypes.byref(m))
            check(st == 0, "kiln_to_dlpack: %s" % k.kiln_ctx_last_error(ctx))
            # The DLPack tensor keeps the buffer alive, past the context too.
            k.kiln_release(t)
            k.kiln_ctx_free(ctx)
            got = np.from_dlpack(Exported(m.value))
            check(got.dtype == npdt and got.shape == shape, "kiln -> numpy %s %s: got %s %s"
                  % (npdt.__name__, shape, got.dtype, got.shape))
            check(np.array_equal(got, want), "kiln -> numpy %s %s: values differ"
                  % (npdt.__name__, shape))
            del got  # kiln's deleter runs here
            gc.collect()
    print("ok: kiln -> numpy.from_dlpack, %d dtypes, 0-d, empty and 3-d" % len(DTYPES))


def numpy_to_kiln(k, dev, rng):
    copied = kept = 0
    for kdt, npdt in DTYPES:
        base = random_array(rng, npdt, (6, 8))
        views = {
            "contiguous": base,
            "transposed": base.T,
            "strided": base[::2, 1::3],
            "0-d": base[2:3, 3:4].reshape(()),
            "empty": base[:0],
        }
        for what, arr in views.items():
            ctx = k.kiln_ctx_new(dev)
            before = sys.getrefcount(arr)  # the capsule holds the array itself
            cap = arr.__dlpack__()
            managed = py.PyCapsule_GetPointer(cap, b"dltensor")
            t = k.kiln_from_dlpack(ctx, managed)
            check(py.PyCapsule_SetName(cap, b"used_dltensor") == 0, "renaming the capsule")
            del cap
            check(t and k.kiln_error(t) == 0, "kiln_from_dlpack %s %s: %s"
                  % (npdt.__name__, what, k.kiln_error_message(t) if t else b"NULL"))
            got = kiln_read(k, t, npdt, arr.shape)
            check(np.array_equal(got, arr), "numpy -> kiln %s %s: values differ"
                  % (npdt.__name__, what))
            held = sys.getrefcount(arr) - before
            check(held in (0, 1), "numpy -> kiln %s %s: %d references held"
                  % (npdt.__name__, what, held))
            if held:
                kept += 1
                # kiln uses the memory in place: NumPy's writes are seen
                if arr.size and what == "contiguous":
                    arr[0, 0] = arr[0, 1]
                    again = kiln_read(k, t, npdt, arr.shape)
                    check(again[0, 0] == arr[0, 1], "a zero-copy tensor missed a write")
            else:
                copied += 1
            k.kiln_release(t)
            k.kiln_ctx_free(ctx)
            check(sys.getrefcount(arr) == before, "numpy -> kiln %s %s: the deleter was "
                  "not called exactly once" % (npdt.__name__, what))
    print("ok: numpy __dlpack__ -> kiln_from_dlpack, %d tensors (%d used in place, %d copied)"
          % (copied + kept, kept, copied))
    return kept


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    k = load(sys.argv[1])
    rng = np.random.default_rng()
    print("numpy", np.__version__, "" if NUMPY_BOOL else "(no bool in its DLPack: bool skipped)")
    for dev, name in [(KILN_REF, "reference"), (KILN_CPU, "cpu")]:
        print("device:", name)
        kiln_to_numpy(k, dev, rng)
        numpy_to_kiln(k, dev, rng)
    # A 64-byte-aligned contiguous array is used in place, not copied.
    ctx = k.kiln_ctx_new(KILN_CPU)
    raw = np.empty(64 * 9 + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    arr = raw[off:off + 64 * 8].view(np.float64).reshape(8, 8)
    arr[:] = rng.standard_normal((8, 8))
    before = sys.getrefcount(arr)
    cap = arr.__dlpack__()
    t = k.kiln_from_dlpack(ctx, py.PyCapsule_GetPointer(cap, b"dltensor"))
    py.PyCapsule_SetName(cap, b"used_dltensor")
    del cap
    check(sys.getrefcount(arr) > before, "an aligned contiguous array was copied")
    arr[3, 4] = 1234.5
    check(kiln_read(k, t, np.float64, (8, 8))[3, 4] == 1234.5, "zero-copy missed a write")
    k.kiln_release(t)
    k.kiln_ctx_free(ctx)
    check(sys.getrefcount(arr) == before, "the aligned array's deleter was not called")
    print("ok: an aligned array is used in place and released once")


if __name__ == "__main__":
    main()
