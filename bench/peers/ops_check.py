"""Checks kiln's ops against PyTorch: forward values and input gradients.

Usage (from the repository root, after `bazel build //:libkiln.so`):

    bench/peers/.venv/bin/python bench/peers/ops_check.py bazel-bin/libkiln.so [--seed N] [-k SUBSTR]

It needs the peer environment (bench/peers/.venv, with NumPy and PyTorch:
`./kiln.sh bench` installs it); it is not part of `./kiln.sh test`, since CI
has no PyTorch. `--kiln-only` runs kiln's side of every case without PyTorch
(to check the calls alone, no comparison).

kiln is loaded through ctypes; the prototypes and enums are read from
api/kiln.h beside this script, so a signature that changes shows up here.
Every case runs on a fresh lazy context on KILN_CPU, with fresh NumPy random
inputs (the seed is printed; --seed repeats a run), which PyTorch gets as the
same f32 values. Each case compares the forward result(s) and, for the float
inputs marked as differentiable, the gradient of sum(out * W) for a random
W of out's shape (kiln_requires_grad, kiln_backward and kiln_grad against
torch.autograd). Integer results (indices) must be equal.

Tolerances, for f32 on both sides: an element passes when
|kiln - torch| <= atol * max(1, max|torch|) + rtol * |torch|, with rtol 1e-4
and atol 1e-5 unless a case says otherwise (with its reason). The printed
"abs" is max |kiln - torch|, "rel" is that over max |torch|.

A case marked known=... is a disagreement found and not yet fixed in kiln:
it is still run and reported (KNOWN-FAIL, or XPASS once it passes), and does
not count as a failure. The output is one line per case and a last line
"N passed, N failed"; the exit status is 1 when any case failed."""
import argparse
import ctypes as C
import os
import re
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HERE, "..", "..", "api", "kiln.h")
RTOL, ATOL = 1e-4, 1e-5

# ---- kiln through ctypes ---------------------------------------------------

_T_HANDLE = C.c_void_p
_PTR_HANDLE = C.POINTER(C.c_void_p)
_SCALARS = {"int": C.c_int, "int64_t": C.c_int64, "uint64_t": C.c_uint64, "double": C.c_double,
            "bool": C.c_bool, "size_t": C.c_size_t}


def _ctype(t):
    """The ctypes type of a C parameter or return type of kiln.h; None when
    the script has no use for it (structs by value)."""
    t = " ".join(t.replace("*", " * ").split())
    if t == "void":
        return None
    if "*" in t:
        base = t.replace("const", "").replace("*", "").strip()
        stars = t.count("*")
        if base == "kiln_tensor" and stars == 2:
            return _PTR_HANDLE
        if stars == 1 and t.startswith("const") and base in ("int64_t", "int", "double"):
            return C.POINTER(_SCALARS[base])
        if stars == 1 and base == "char":
            return C.c_char_p
        return C.c_void_p
    if t.startswith("const "):
        t = t[6:]
    if t in _SCALARS:
        return _SCALARS[t]
    if t.startswith("kiln_") and t not in ("kiln_stats", "kiln_machine"):
        return C.c_int  # an enum
    return False


def parse_header(path):
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    enums = {}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, flags=re.S):
        v = -1
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            if "=" in item:
                name, val = (s.strip() for s in item.split("="))
                v = int(val, 0)
            else:
                name, v = item, v + 1
            enums[name] = v
    protos = {}
    for ret, name, args in re.findall(r"KILN_API\s+([^;(]*?)\b(kiln_\w+)\s*\(([^)]*)\)\s*;",
                                      text, flags=re.S):
        args = " ".join(args.split())
        params = []
        if args and args != "void":
            for a in args.split(","):
                a = a.strip()
                m = re.match(r"(.*?)(\w+)$", a)
                params.append(m.group(1).strip())
        protos[name] = (ret.strip(), params)
    return enums, protos


class KilnError(Exception):
    pass


class Lib:
    def __init__(self, so_path, header):
        self.dll = C.CDLL(os.path.abspath(so_path))
        self.enums, self.protos = parse_header(header)
        self.fns = {}
        for name, (ret, params) in self.protos.items():
            rt = _ctype(ret)
            pts = [_ctype(p) for p in params]
            if rt is False or False in pts or not hasattr(self.dll, name):
                continue
            f = getattr(self.dll, name)
            f.restype = rt
            f.argtypes = pts
            self.fns[name] = (f, params)
        for k, v in self.enums.items():
            setattr(self, k, v)

    def has(self, name):
        return "kiln_" + name in self.fns


_NP_OF = {"KILN_F32": np.float32, "KILN_F64": np.float64, "KILN_I32": np.int32,
          "KILN_I64": np.int64, "KILN_U8": np.uint8, "KILN_BOOL": np.bool_, "KILN_I8": np.int8}


class Out:
    """An out-parameter kiln_tensor **: after the call, .t is the tensor."""

    def __init__(self):
        self.h = C.c_void_p()
        self.t = None


class Tensor:
    def __init__(self, k, h):
        self.k, self.h = k, h


class Kiln:
    """One lazy KILN_CPU context; k.op(args) calls kiln_op, converting
    Tensors, None (NULL), lists (arrays) and Outs, and raises KilnError when
    the result carries an error."""

    def __init__(self, lib):
        self.lib = lib
        self.ctx = lib.fns["kiln_ctx_new"][0](lib.KILN_CPU)
        if not self.ctx:
            raise KilnError("kiln_ctx_new: " + lib.fns["kiln_last_ctx_error"][0]().decode())
        self.np_of = {lib.enums[k]: v for k, v in _NP_OF.items()}
        self.dt_of = {np.dtype(v): lib.enums[k] for k, v in _NP_OF.items()}

    def free(self):
        self.lib.fns["kiln_ctx_free"][0](self.ctx)
        self.ctx = None

    def raw(self, name, *args):
        f, params = self.lib.fns["kiln_" + name]
        if len(args) != len(params):
            raise TypeError("kiln_%s takes %d arguments, got %d" % (name, len(params), len(args)))
        conv, outs = [], []
        for a, p, t in zip(args, params, f.argtypes):
            if isinstance(a, Out):
                outs.append(a)
                conv.append(C.byref(a.h))
            elif isinstance(a, Tensor):
                conv.append(a.h)
            elif a is None:
                conv.append(None)
            elif isinstance(a, (list, tuple)):
                if t is _PTR_HANDLE:
                    conv.append((C.c_void_p * len(a))(*[x.h for x in a]))
                else:
                    conv.append((t._type_ * len(a))(*a))
            elif isinstance(a, str):
                conv.append(a.encode())
            else:
                conv.append(a)
        r = f(*conv)
        for o in outs:
            o.t = Tensor(self, o.h.value) if o.h.value else None
        return r

    def check(self, t, what):
        st = self.lib.fns["kiln_error"][0](t.h)
        if st != 0:
            msg = self.lib.fns["kiln_error_message"][0](t.h).decode()
            raise KilnError("%s: %s" % (what, msg))
        return t

    def __getattr__(self, name):
        if "kiln_" + name not in self.lib.fns:
            raise AttributeError(name)
        ret = self.lib.protos["kiln_" + name][0]

        def call(*args):
            r = self.raw(name, *args)
            if ret.replace(" ", "") == "kiln_tensor*":
                if not r:
                    raise KilnError("kiln_%s returned NULL" % name)
                t = self.check(Tensor(self, r), "kiln_" + name)
                for a in args:
                    if isinstance(a, Out) and a.t is not None:
                        self.check(a.t, "kiln_%s (out)" % name)
                return t
            if ret == "kiln_status" and r != 0:
                raise KilnError("kiln_%s: status %d: %s" % (
                    name, r, self.lib.fns["kiln_ctx_last_error"][0](self.ctx).decode()))
            return r
        return call

    def tensor(self, a):
        a = np.ascontiguousarray(a)
        dims = list(a.shape)
        return self.from_data(self.ctx, self.dt_of[a.dtype], len(dims), dims or None,
                              a.ctypes.data_as(C.c_void_p))

    def host(self, t):
        nd = self.ndim(t.h)
        shp = self.shape(t.h)
        dims = tuple(shp[i] for i in range(nd))
        out = np.empty(dims, dtype=self.np_of[self.dtype_of(t.h)])
        self.to_host(t, out.ctypes.data_as(C.c_void_p), out.nbytes)
        return out


# ---- cases -------------------------------------------------------------------

class Case:
    """op and shape label; inputs: NumPy arrays; kfn(k, *kiln tensors) and
    tfn(*torch tensors) give the result or a tuple whose first element is
    differentiated (the others compared only); grad: the indices of the
    inputs whose gradients are compared (default: every float input)."""

    def __init__(self, op, label, inputs, kfn, tfn, grad=None, rtol=RTOL, atol=ATOL,
                 known=None, need=None):
        self.op, self.label, self.inputs, self.kfn, self.tfn = op, label, inputs, kfn, tfn
        if grad is None:
            grad = [i for i, a in enumerate(inputs) if a.dtype == np.float32]
        self.grad, self.rtol, self.atol, self.known = grad, rtol, atol, known
        self.need = need or [op]


def compare(got, ref, rtol, atol):
    """(max abs error, normwise relative error, pass) of got against ref."""
    if got.shape != ref.shape:
        return float("inf"), float("inf"), False, "shape %s, torch %s" % (got.shape, ref.shape)
    if got.dtype != ref.dtype:
        return float("inf"), float("inf"), False, "dtype %s, torch %s" % (got.dtype, ref.dtype)
    if got.dtype.kind in "iub":
        bad = int(np.sum(got.astype(np.int64) != ref.astype(np.int64)))
        return float(bad), float(bad), bad == 0, "%d of %d differ" % (bad, got.size) if bad else ""
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nan_g, nan_r = np.isnan(g), np.isnan(r)
    if (nan_g != nan_r).any():
        return float("nan"), float("nan"), False, "NaN at %d places, torch %d" % (
            nan_g.sum(), nan_r.sum())
    g, r = np.where(nan_g, 0, g), np.where(nan_r, 0, r)
    if g.size == 0:
        return 0.0, 0.0, True, ""
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf
        err = np.abs(g - r)
    err = np.where(g == r, 0.0, err)  # matching infinities
    scale = max(1.0, float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)))
    ok = bool(np.all(err <= atol * scale + rtol * np.abs(r)))
    amax = float(np.max(err))
    rel = amax / max(float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)), 1e-30)
    return amax, rel, ok, ""


def run_kiln(lib, case, weights):
    k = Kiln(lib)
    try:
        ts = []
        for i, a in enumerate(case.inputs):
            t = k.tensor(a)
            if i in case.grad:
                k.requires_grad(t, True)
            ts.append(t)
        res = case.kfn(k, *ts)
        res = list(res) if isinstance(res, tuple) else [res]
        outs = [k.host(r) for r in res]
        grads = []
        if case.grad and outs[0].dtype.kind == "f":
            w = k.tensor(weights(outs[0].shape))
            loss = k.sum(k.mul(res[0], w), 0, None, False)
            k.backward(loss)
            for i in case.grad:
                g = k.raw("grad", ts[i])
                grads.append(None if not g else k.host(k.check(Tensor(k, g), "kiln_grad")))
        return outs, grads
    finally:
        k.free()


def run_torch(torch, case, weights):
    ts = []
    for i, a in enumerate(case.inputs):
        t = torch.from_numpy(a.copy())
        if i in case.grad:
            t.requires_grad_(True)
        ts.append(t)
    res = case.tfn(*ts)
    res = list(res) if isinstance(res, tuple) else [res]
    outs = [r.detach().numpy() for r in res]
    grads = []
    if case.grad and outs[0].dtype.kind == "f":
        w = torch.from_numpy(weights(outs[0].shape))
        (res[0] * w).sum().backward()
        for i in case.grad:
            g = ts[i].grad
            grads.append(np.zeros_like(case.inputs[i]) if g is None else g.numpy())
    return outs, grads


def build_cases(rng, torch, F):
    """Every case; torch and F may be None (--kiln-only): then the torch
    functions are never called."""
    cases = []
    f32 = np.float32

    def randn(*s, scale=1.0):
        return (rng.standard_normal(s) * scale).astype(f32)

    def unif(lo, hi, *s):
        return rng.uniform(lo, hi, s).astype(f32)

    def away(*s, lo=0.5, hi=2.0):
        """Values of either sign with |v| in [lo, hi]: divisors, bases."""
        return (rng.uniform(lo, hi, s) * rng.choice([-1, 1], s)).astype(f32)

    def ints(hi, *s, lo=0):
        return rng.integers(lo, hi, s).astype(np.int64)

    def add(*a, **kw):
        cases.append(Case(*a, **kw))

    def lbl(*shapes):
        return ",".join("x".join(str(d) for d in s) or "0d" for s in shapes)

    # -- elementwise unary: the rounding ops, erf/erfc and the common activations
    unary = [
        ("trunc", lambda t: torch.trunc(t), lambda s: randn(*s, scale=3)),
        ("floor", lambda t: torch.floor(t), lambda s: randn(*s, scale=3)),
        ("ceil", lambda t: torch.ceil(t), lambda s: randn(*s, scale=3)),
        ("round", lambda t: torch.round(t), lambda s: randn(*s, scale=3)),
        ("sign", lambda t: torch.sign(t), lambda s: randn(*s)),
        ("erf", lambda t: torch.erf(t), lambda s: randn(*s, scale=1.5)),
        ("erfc", lambda t: torch.erfc(t), lambda s: randn(*s, scale=2)),
        ("exp", lambda t: torch.exp(t), lambda s: randn(*s)),
        ("log", lambda t: torch.log(t), lambda s: unif(0.1, 4, *s)),
        ("sqrt", lambda t: torch.sqrt(t), lambda s: unif(0.1, 4, *s)),
        ("rsqrt", lambda t: torch.rsqrt(t), lambda s: unif(0.2, 4, *s)),
        ("expm1", lambda t: torch.expm1(t), lambda s: randn(*s)),
        ("log1p", lambda t: torch.log1p(t), lambda s: unif(-0.5, 3, *s)),
        ("sin", lambda t: torch.sin(t), lambda s: randn(*s, scale=3)),
        ("cos", lambda t: torch.cos(t), lambda s: randn(*s, scale=3)),
        ("tan", lambda t: torch.tan(t), lambda s: unif(-1.2, 1.2, *s)),
        ("asin", lambda t: torch.asin(t), lambda s: unif(-0.9, 0.9, *s)),
        ("acos", lambda t: torch.acos(t), lambda s: unif(-0.9, 0.9, *s)),
        ("atan", lambda t: torch.atan(t), lambda s: randn(*s, scale=2)),
        ("sinh", lambda t: torch.sinh(t), lambda s: randn(*s)),
        ("cosh", lambda t: torch.cosh(t), lambda s: randn(*s)),
        ("asinh", lambda t: torch.asinh(t), lambda s: randn(*s, scale=2)),
        ("acosh", lambda t: torch.acosh(t), lambda s: unif(1.1, 4, *s)),
        ("atanh", lambda t: torch.atanh(t), lambda s: unif(-0.9, 0.9, *s)),
        ("tanh", lambda t: torch.tanh(t), lambda s: randn(*s, scale=2)),
        ("sigmoid", lambda t: torch.sigmoid(t), lambda s: randn(*s, scale=3)),
        ("relu", lambda t: torch.relu(t), lambda s: randn(*s)),
        ("gelu", lambda t: F.gelu(t), lambda s: randn(*s, scale=2)),
        ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh"), lambda s: randn(*s, scale=2)),
        ("silu", lambda t: F.silu(t), lambda s: randn(*s, scale=2)),
        ("hardswish", lambda t: F.hardswish(t), lambda s: randn(*s, scale=3)),
        ("abs", lambda t: torch.abs(t), lambda s: randn(*s)),
        ("recip", lambda t: torch.reciprocal(t), lambda s: away(*s)),
    ]
    for name, tf, gen in unary:
        for s in [(7,), (3, 5), (2, 3, 17)]:
            add(name, lbl(s), [gen(s)], (lambda n: lambda k, x: getattr(k, n)(x))(name),
                (lambda tf: lambda x: tf(x))(tf))

    # -- elementwise binary, broadcasting
    binary = [
        ("atan2", torch and torch.atan2, lambda s: randn(*s), lambda s: randn(*s)),
        ("logaddexp", torch and torch.logaddexp, lambda s: randn(*s, scale=3),
         lambda s: randn(*s, scale=3)),
        ("fmod", torch and torch.fmod, lambda s: randn(*s, scale=4), lambda s: away(*s)),
        ("mod", torch and torch.remainder, lambda s: randn(*s, scale=4), lambda s: away(*s)),
        ("floor_divide", torch and torch.floor_divide, lambda s: randn(*s, scale=4),
         lambda s: away(*s)),
        ("copysign", torch and torch.copysign, lambda s: randn(*s), lambda s: randn(*s)),
        ("maximum", torch and torch.maximum, lambda s: randn(*s), lambda s: randn(*s)),
        ("minimum", torch and torch.minimum, lambda s: randn(*s), lambda s: randn(*s)),
        ("pow", torch and torch.pow, lambda s: unif(0.2, 3, *s), lambda s: randn(*s)),
        ("div", torch and torch.div, lambda s: randn(*s), lambda s: away(*s)),
    ]
    for name, tf, ga, gb in binary:
        for sa, sb in [((11,), (11,)), ((3, 1, 5), (4, 5)), ((2, 7), (1,))]:
            # torch has no gradient for floor_divide: only the forward values
            grad = [] if name == "floor_divide" else None
            add(name, lbl(sa, sb), [ga(sa), gb(sb)],
                (lambda n: lambda k, a, b: getattr(k, n)(a, b))(name),
                (lambda tf: lambda a, b: tf(a, b))(tf), grad=grad)

    # -- triangles, roll, flip
    for s, kk in [((4, 5), 0), ((6, 3), 1), ((2, 3, 7, 4), -2)]:
        add("tril", lbl(s) + " k=%d" % kk, [randn(*s)], lambda k, x, kk=kk: k.tril(x, kk),
            lambda x, kk=kk: torch.tril(x, kk))
        add("triu", lbl(s) + " k=%d" % kk, [randn(*s)], lambda k, x, kk=kk: k.triu(x, kk),
            lambda x, kk=kk: torch.triu(x, kk))
    for s, sh, ax in [((9,), 2, 0), ((4, 7), -3, 1), ((3, 5, 2), 7, 1)]:
        add("roll", lbl(s) + " shift=%d axis=%d" % (sh, ax), [randn(*s)],
            lambda k, x, sh=sh, ax=ax: k.roll(x, sh, ax),
            lambda x, sh=sh, ax=ax: torch.roll(x, sh, ax))
    for s, axes in [((9,), [0]), ((4, 7), [1]), ((3, 5, 2), [0, 2])]:
        add("flip", lbl(s) + " axes=%s" % axes, [randn(*s)],
            lambda k, x, axes=axes: k.flip(x, len(axes), axes),
            lambda x, axes=axes: torch.flip(x, axes))

    # -- cumulative ops
    for s, ax in [((13,), 0), ((3, 17), 1), ((5, 4), 0), ((2, 6, 3), 1)]:
        L = lbl(s) + " axis=%d" % ax
        add("cumsum", L, [randn(*s)], lambda k, x, ax=ax: k.cumsum(x, ax),
            lambda x, ax=ax: torch.cumsum(x, ax))
        # factors near 1 in size, so that products of up to 17 stay moderate
        add("cumprod", L, [away(*s, lo=0.6, hi=1.5)], lambda k, x, ax=ax: k.cumprod(x, ax),
            lambda x, ax=ax: torch.cumprod(x, ax))
        # random floats have no ties, so the even split of tied gradients
        # (kiln.h) and PyTorch's choice of one index do not meet here
        add("cummax", L, [randn(*s)], lambda k, x, ax=ax: k.cummax(x, ax),
            lambda x, ax=ax: torch.cummax(x, ax).values)
        add("cummin", L, [randn(*s)], lambda k, x, ax=ax: k.cummin(x, ax),
            lambda x, ax=ax: torch.cummin(x, ax).values)
        add("logcumsumexp", L, [randn(*s, scale=3)], lambda k, x, ax=ax: k.logcumsumexp(x, ax),
            lambda x, ax=ax: torch.logcumsumexp(x, ax))

    # -- sorting (stable on both sides; random floats have no ties)
    for s, ax in [((13,), 0), ((4, 9), 1), ((6, 5), 0), ((2, 3, 33), -1)]:
        for desc in (False, True):
            L = lbl(s) + " axis=%d desc=%d" % (ax, desc)
            add("sort", L, [randn(*s)], lambda k, x, ax=ax, d=desc: k.sort(x, ax, d),
                lambda x, ax=ax, d=desc: torch.sort(x, dim=ax, descending=d, stable=True).values)
            add("argsort", L, [randn(*s)], lambda k, x, ax=ax, d=desc: k.argsort(x, ax, d),
                lambda x, ax=ax, d=desc: torch.argsort(x, dim=ax, descending=d, stable=True))
    for s, kk, ax in [((13,), 4, 0), ((4, 9), 3, 1), ((6, 5), 6, 0), ((2, 3, 33), 1, -1)]:
        for largest in (True, False):
            def ktop(k, x, kk=kk, ax=ax, lg=largest):
                o = Out()
                v = k.topk(x, kk, ax, lg, o)
                return v, o.t

            def ttop(x, kk=kk, ax=ax, lg=largest):
                r = torch.topk(x, kk, dim=ax, largest=lg, sorted=True)
                return r.values, r.indices
            add("topk", lbl(s) + " k=%d axis=%d largest=%d" % (kk, ax, largest), [randn(*s)],
                ktop, ttop)

    # -- gather, scatter, index_select, index, embedding
    for ts, ax, isz in [((4, 6), 1, (4, 3)), ((5, 7), 0, (3, 7)), ((3, 5, 4), 2, (2, 5, 6)),
                        ((6, 3), 0, (9, 2))]:
        add("gather", lbl(ts) + " axis=%d index=%s" % (ax, lbl(isz)),
            [randn(*ts), ints(ts[ax], *isz)], lambda k, x, i, ax=ax: k.gather(x, ax, i),
            lambda x, i, ax=ax: torch.gather(x, ax, i))
    scat = [((5, 4), 0, (3, 4)), ((4, 7), 1, (4, 9)), ((3, 6, 5), 1, (2, 8, 5)), ((6,), 0, (11,))]
    for ts, ax, isz in scat:
        L = lbl(ts) + " axis=%d index=%s" % (ax, lbl(isz))
        add("scatter_add", L, [randn(*ts), ints(ts[ax], *isz), randn(*isz)],
            lambda k, x, i, s, ax=ax: k.scatter_add(x, ax, i, s),
            lambda x, i, s, ax=ax: torch.scatter_add(x, ax, i, s))
        red = {"sum": lib.KILN_SCATTER_SUM, "amax": lib.KILN_SCATTER_AMAX,
               "amin": lib.KILN_SCATTER_AMIN, "mean": lib.KILN_SCATTER_MEAN,
               "prod": lib.KILN_SCATTER_PROD}
        for rname, rk in red.items():
            for inc in (True, False):
                gen = (lambda *s: away(*s, lo=0.5, hi=1.5)) if rname == "prod" else randn
                add("scatter_reduce", L + " %s include_self=%d" % (rname, inc),
                    [gen(*ts), ints(ts[ax], *isz), gen(*isz)],
                    lambda k, x, i, s, ax=ax, rk=rk, inc=inc:
                        k.scatter_reduce(x, ax, i, s, rk, inc),
                    lambda x, i, s, ax=ax, rn=rname, inc=inc:
                        torch.scatter_reduce(x, ax, i, s, rn, include_self=inc))
        # scatter with distinct indices per row only: PyTorch leaves the
        # winner of a repeated index undefined (kiln: the last)
        if len(isz) == 2 and isz[ax] <= ts[ax]:
            perm_idx = np.stack([rng.permutation(ts[ax])[:isz[ax]] for _ in range(isz[1 - ax])],
                                axis=1 - ax).astype(np.int64)
            add("scatter", L + " distinct", [randn(*ts), perm_idx, randn(*isz)],
                lambda k, x, i, s, ax=ax: k.scatter(x, ax, i, s),
                lambda x, i, s, ax=ax: torch.scatter(x, ax, i, s))
    for ts, ax, n in [((5, 7), 0, 4), ((5, 7), 1, 9), ((2, 3, 4), 2, 5), ((8,), 0, 3)]:
        add("index_select", lbl(ts) + " axis=%d n=%d" % (ax, n), [randn(*ts), ints(ts[ax], n)],
            lambda k, x, i, ax=ax: k.index_select(x, ax, i),
            lambda x, i, ax=ax: torch.index_select(x, ax, i))
    for ts, ax, isz in [((5, 7), 1, (2, 3)), ((6, 4), 0, (5,)), ((3, 4, 5), 1, (2, 2, 2))]:
        def tidx(x, i, ax=ax):
            return x[(slice(None),) * ax + (i,)]
        add("index", lbl(ts) + " axis=%d index=%s (negative too)" % (ax, lbl(isz)),
            [randn(*ts), ints(ts[ax], *isz, lo=-ts[ax])],
            lambda k, x, i, ax=ax: k.index(x, ax, i), tidx)
    for v, d, isz in [(10, 4, (3, 5)), (7, 3, (6,)), (17, 8, (2, 3, 2))]:
        add("embedding", "V=%d D=%d indices=%s" % (v, d, lbl(isz)), [ints(v, *isz), randn(v, d)],
            lambda k, i, w: k.embedding(i, w), lambda i, w: F.embedding(i, w))

    # -- convolutions
    conv1 = [((2, 3, 11), (4, 3, 3), 1, 0, 1, 1), ((2, 3, 11), (4, 3, 3), 2, 1, 2, 1),
             ((1, 6, 10), (6, 2, 4), 1, 2, 1, 3), ((3, 4, 9), (2, 4, 1), 3, 0, 1, 1)]
    for xs, ws, st, pd, dl, g in conv1:
        add("conv1d", "%s stride=%d pad=%d dil=%d groups=%d" % (lbl(xs, ws), st, pd, dl, g),
            [randn(*xs), randn(*ws), randn(ws[0])],
            lambda k, x, w, b, st=st, pd=pd, dl=dl, g=g: k.conv1d(x, w, b, st, pd, dl, g),
            lambda x, w, b, st=st, pd=pd, dl=dl, g=g: F.conv1d(x, w, b, st, pd, dl, g))
    conv2 = [((2, 3, 9, 8), (4, 3, 3, 2), (1, 1), (0, 0), (1, 1), 1, True),
             ((2, 3, 9, 8), (4, 3, 3, 2), (2, 1), (1, 0), (1, 2), 1, True),
             ((1, 4, 7, 7), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2, True),
             ((2, 6, 5, 6), (6, 1, 3, 3), (2, 2), (1, 1), (2, 1), 6, False),
             ((1, 3, 13, 11), (5, 3, 5, 4), (3, 2), (2, 1), (1, 1), 1, False)]
    for xs, ws, st, pd, dl, g, bias in conv2:
        inputs = [randn(*xs), randn(*ws)] + ([randn(ws[0])] if bias else [])
        add("conv2d", "%s stride=%s pad=%s dil=%s groups=%d bias=%d" % (
            lbl(xs, ws), st, pd, dl, g, bias), inputs,
            lambda k, x, w, b=None, st=st, pd=pd, dl=dl, g=g:
                k.conv2d(x, w, b, st[0], st[1], pd[0], pd[1], dl[0], dl[1], g),
            lambda x, w, b=None, st=st, pd=pd, dl=dl, g=g: F.conv2d(x, w, b, st, pd, dl, g))
    conv3 = [((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), [1, 2, 1], [1, 0, 1], [1, 1, 2], 1),
             ((1, 4, 4, 5, 4), (4, 2, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], 2),
             ((2, 1, 6, 5, 7), (2, 1, 3, 2, 3), [2, 1, 3], [0, 1, 1], [1, 2, 1], 1)]
    for xs, ws, st, pd, dl, g in conv3:
        add("conv3d", "%s stride=%s pad=%s dil=%s groups=%d" % (lbl(xs, ws), st, pd, dl, g),
            [randn(*xs), randn(*ws), randn(ws[0])],
            lambda k, x, w, b, st=st, pd=pd, dl=dl, g=g: k.conv3d(x, w, b, st, pd, dl, g),
            lambda x, w, b, st=st, pd=pd, dl=dl, g=g: F.conv3d(x, w, b, st, pd, dl, g))
    convt1 = [((2, 3, 7), (3, 4, 3), 2, 1, 1, 1, 1), ((1, 4, 6), (4, 3, 4), 3, 0, 2, 1, 2),
              ((2, 2, 5), (2, 3, 2), 1, 0, 1, 3, 1)]
    for xs, ws, st, pd, op, dl, g in convt1:
        add("conv_transpose1d", "%s stride=%d pad=%d out_pad=%d dil=%d groups=%d" % (
            lbl(xs, ws), st, pd, op, dl, g), [randn(*xs), randn(*ws), randn(ws[1] * g)],
            lambda k, x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                k.conv_transpose1d(x, w, b, st, pd, op, dl, g),
            lambda x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                F.conv_transpose1d(x, w, b, st, pd, op, g, dl))
    convt2 = [((1, 4, 5, 4), (4, 3, 3, 3), [2, 3], [1, 0], [1, 2], [1, 1], 1),
              ((2, 4, 3, 5), (4, 2, 3, 2), [2, 2], [0, 1], [0, 1], [1, 1], 2),
              ((1, 3, 4, 4), (3, 2, 2, 3), [1, 2], [0, 1], [1, 0], [2, 1], 1),
              ((2, 2, 6, 3), (2, 5, 4, 4), [3, 1], [2, 1], [2, 0], [1, 1], 1)]
    for xs, ws, st, pd, op, dl, g in convt2:
        add("conv_transpose2d", "%s stride=%s pad=%s out_pad=%s dil=%s groups=%d" % (
            lbl(xs, ws), st, pd, op, dl, g), [randn(*xs), randn(*ws), randn(ws[1] * g)],
            lambda k, x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                k.conv_transpose2d(x, w, b, st, pd, op, dl, g),
            lambda x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                F.conv_transpose2d(x, w, b, st, pd, op, g, dl))
    convt3 = [((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), [2, 1, 2], [0, 1, 1], [1, 0, 1], [1, 1, 1], 1)]
    for xs, ws, st, pd, op, dl, g in convt3:
        add("conv_transpose3d", "%s stride=%s pad=%s out_pad=%s dil=%s groups=%d" % (
            lbl(xs, ws), st, pd, op, dl, g), [randn(*xs), randn(*ws), randn(ws[1] * g)],
            lambda k, x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                k.conv_transpose3d(x, w, b, st, pd, op, dl, g),
            lambda x, w, b, st=st, pd=pd, op=op, dl=dl, g=g:
                F.conv_transpose3d(x, w, b, st, pd, op, g, dl))

    # -- pooling
    for xs, kk, st, pd, dl, ceil in [((2, 3, 11), 3, 2, 1, 1, False), ((2, 3, 11), 3, 2, 1, 1, True),
                                     ((1, 2, 10), 2, 3, 1, 2, True), ((2, 2, 9), 4, 1, 2, 1, False)]:
        L = "%s k=%d stride=%d pad=%d dil=%d ceil=%d" % (lbl(xs), kk, st, pd, dl, ceil)

        def kmp1(k, x, a=(kk, st, pd, dl, ceil)):
            o = Out()
            v = k.max_pool1d_ex(x, *a, o)
            return v, o.t
        add("max_pool1d", L + " +indices", [randn(*xs)], kmp1,
            lambda x, a=(kk, st, pd, dl, ceil): F.max_pool1d(x, *a, return_indices=True))
        if dl == 1:
            for cip in (True, False):
                add("avg_pool1d", L + " count_include_pad=%d" % cip, [randn(*xs)],
                    lambda k, x, a=(kk, st, pd, ceil, cip): k.avg_pool1d_ex(x, *a),
                    lambda x, a=(kk, st, pd, ceil, cip): F.avg_pool1d(x, *a))
    pool2 = [((2, 3, 9, 8), [3, 2], [2, 2], [1, 0], [1, 1], False),
             ((2, 3, 9, 8), [3, 2], [2, 2], [1, 0], [1, 1], True),
             ((1, 2, 11, 7), [3, 3], [2, 3], [1, 1], [2, 1], True),
             ((3, 7, 6), [2, 2], [2, 2], [0, 0], [1, 1], False),
             ((1, 1, 10, 10), [4, 3], [3, 2], [2, 1], [1, 2], False)]
    for xs, kk, st, pd, dl, ceil in pool2:
        L = "%s k=%s stride=%s pad=%s dil=%s ceil=%d" % (lbl(xs), kk, st, pd, dl, ceil)

        def kmp2(k, x, a=(kk, st, pd, dl, ceil)):
            o = Out()
            v = k.max_pool2d_ex(x, *a, o)
            return v, o.t
        add("max_pool2d", L + " +indices", [randn(*xs)], kmp2,
            lambda x, a=(kk, st, pd, dl, ceil): F.max_pool2d(x, *a, return_indices=True))
        if dl == [1, 1]:
            for cip in (True, False):
                add("avg_pool2d", L + " count_include_pad=%d" % cip, [randn(*xs)],
                    lambda k, x, a=(kk, st, pd, ceil, cip): k.avg_pool2d_ex(x, *a),
                    lambda x, a=(kk, st, pd, ceil, cip): F.avg_pool2d(x, *a))
    add("max_pool2d_legacy", "2x3x9x8 k=3x2 stride=2x1 pad=1x1", [randn(2, 3, 9, 8)],
        lambda k, x: k.max_pool2d(x, 3, 2, 2, 1, 1, 1),
        lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1)), need=["max_pool2d"])
    add("avg_pool2d_legacy", "2x3x9x8 k=3x2 stride=2x1 pad=1x1", [randn(2, 3, 9, 8)],
        lambda k, x: k.avg_pool2d(x, 3, 2, 2, 1, 1, 1),
        lambda x: F.avg_pool2d(x, (3, 2), (2, 1), (1, 1)), need=["avg_pool2d"])
    pool3 = [((1, 2, 5, 6, 7), [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 2], False),
             ((1, 2, 5, 6, 7), [2, 3, 2], [2, 2, 1], [1, 1, 0], [1, 1, 1], True)]
    for xs, kk, st, pd, dl, ceil in pool3:
        L = "%s k=%s stride=%s pad=%s dil=%s ceil=%d" % (lbl(xs), kk, st, pd, dl, ceil)

        def kmp3(k, x, a=(kk, st, pd, dl, ceil)):
            o = Out()
            v = k.max_pool3d(x, *a, o)
            return v, o.t
        add("max_pool3d", L + " +indices", [randn(*xs)], kmp3,
            lambda x, a=(kk, st, pd, dl, ceil): F.max_pool3d(x, *a, return_indices=True))
        if dl == [1, 1, 1]:
            for cip in (True, False):
                add("avg_pool3d", L + " count_include_pad=%d" % cip, [randn(*xs)],
                    lambda k, x, a=(kk, st, pd, ceil, cip): k.avg_pool3d(x, *a),
                    lambda x, a=(kk, st, pd, ceil, cip): F.avg_pool3d(x, *a))

    # max_pool with indices into max_unpool. Windows that do not overlap
    # only: where two outputs take one input element, kiln's unpool adds them
    # (kiln.h) and PyTorch's writes one of them.
    for xs, kk, st, outsz in [((2, 3, 8, 6), [2, 2], [2, 2], None),
                              ((1, 2, 9, 7), [3, 2], [3, 2], (10, 7)),
                              ((2, 1, 5, 5), [2, 3], [2, 3], (5, 5))]:
        H = outsz or ((xs[2] // kk[0]) * kk[0], (xs[3] // kk[1]) * kk[1])

        def kun2(k, x, kk=kk, st=st, H=H):
            o = Out()
            v = k.max_pool2d_ex(x, kk, st, [0, 0], [1, 1], False, o)
            return k.max_unpool2d(v, o.t, H[0], H[1])

        def tun2(x, kk=kk, st=st, H=H):
            v, i = F.max_pool2d(x, kk, st, return_indices=True)
            return F.max_unpool2d(v, i, kk, st, output_size=list(H))
        add("max_unpool2d", "%s k=%s out=%dx%d" % (lbl(xs), kk, H[0], H[1]), [randn(*xs)],
            kun2, tun2, need=["max_pool2d_ex", "max_unpool2d"])

    def kun1(k, x):
        o = Out()
        v = k.max_pool1d_ex(x, 3, 3, 0, 1, False, o)
        return k.max_unpool1d(v, o.t, 13)
    add("max_unpool1d", "2x3x13 k=3", [randn(2, 3, 13)], kun1,
        lambda x: F.max_unpool1d(*F.max_pool1d(x, 3, 3, return_indices=True), 3, 3,
                                 output_size=[13]), need=["max_pool1d_ex", "max_unpool1d"])

    def kun3(k, x):
        o = Out()
        v = k.max_pool3d(x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False, o)
        return k.max_unpool3d(v, o.t, [4, 5, 6])
    add("max_unpool3d", "1x2x4x5x6 k=2", [randn(1, 2, 4, 5, 6)], kun3,
        lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, 2, return_indices=True), 2, 2,
                                 output_size=[4, 5, 6]), need=["max_pool3d", "max_unpool3d"])

    # -- adaptive pooling
    for xs, o in [((2, 3, 10), 4), ((1, 2, 7), 7), ((2, 2, 5), 3), ((1, 1, 6), 10)]:
        add("adaptive_avg_pool1d", "%s out=%d" % (lbl(xs), o), [randn(*xs)],
            lambda k, x, o=o: k.adaptive_avg_pool1d(x, o),
            lambda x, o=o: F.adaptive_avg_pool1d(x, o))

        def kam1(k, x, o=o):
            out = Out()
            v = k.adaptive_max_pool1d_ex(x, o, out)
            return v, out.t
        add("adaptive_max_pool1d", "%s out=%d +indices" % (lbl(xs), o), [randn(*xs)], kam1,
            lambda x, o=o: F.adaptive_max_pool1d(x, o, return_indices=True),
            need=["adaptive_max_pool1d_ex"])
    for xs, o in [((2, 3, 10, 7), (3, 4)), ((1, 2, 9, 9), (5, 5)), ((3, 6, 5), (2, 3)),
                  ((1, 1, 4, 5), (7, 6))]:
        add("adaptive_avg_pool2d", "%s out=%dx%d" % (lbl(xs), *o), [randn(*xs)],
            lambda k, x, o=o: k.adaptive_avg_pool2d(x, *o),
            lambda x, o=o: F.adaptive_avg_pool2d(x, o))
        add("adaptive_max_pool2d", "%s out=%dx%d" % (lbl(xs), *o), [randn(*xs)],
            lambda k, x, o=o: k.adaptive_max_pool2d(x, *o),
            lambda x, o=o: F.adaptive_max_pool2d(x, o))

        def kam2(k, x, o=o):
            out = Out()
            v = k.adaptive_max_pool2d_ex(x, o[0], o[1], out)
            return v, out.t
        add("adaptive_max_pool2d_ex", "%s out=%dx%d +indices" % (lbl(xs), *o), [randn(*xs)],
            kam2, lambda x, o=o: F.adaptive_max_pool2d(x, o, return_indices=True))
    for xs, o in [((2, 3, 5, 6, 7), (2, 3, 4)), ((3, 4, 4, 5), (3, 2, 5))]:
        add("adaptive_avg_pool3d", "%s out=%dx%dx%d" % (lbl(xs), *o), [randn(*xs)],
            lambda k, x, o=o: k.adaptive_avg_pool3d(x, *o),
            lambda x, o=o: F.adaptive_avg_pool3d(x, o), need=["adaptive_avg_pool3d"])
        add("adaptive_max_pool3d", "%s out=%dx%dx%d" % (lbl(xs), *o), [randn(*xs)],
            lambda k, x, o=o: k.adaptive_max_pool3d(x, *o),
            lambda x, o=o: F.adaptive_max_pool3d(x, o), need=["adaptive_max_pool3d"])

    # -- interpolation
    NEAREST, LINEAR, BICUBIC = lib.KILN_INTERP_NEAREST, lib.KILN_INTERP_LINEAR, \
        lib.KILN_INTERP_BICUBIC
    tmode = {(1, NEAREST): "nearest", (2, NEAREST): "nearest", (3, NEAREST): "nearest",
             (1, LINEAR): "linear", (2, LINEAR): "bilinear", (3, LINEAR): "trilinear",
             (2, BICUBIC): "bicubic"}
    interp = [((2, 3, 7), [12], NEAREST, False), ((2, 3, 7), [4], NEAREST, False),
              ((2, 3, 7), [12], LINEAR, False), ((2, 3, 7), [5], LINEAR, True),
              ((1, 2, 5, 6), [9, 4], NEAREST, False), ((1, 2, 5, 6), [3, 11], NEAREST, False),
              ((1, 2, 5, 6), [9, 4], LINEAR, False), ((1, 2, 5, 6), [9, 4], LINEAR, True),
              ((2, 1, 7, 5), [4, 10], LINEAR, False), ((1, 2, 5, 6), [9, 13], BICUBIC, False),
              ((1, 2, 5, 6), [9, 13], BICUBIC, True), ((2, 1, 8, 7), [3, 5], BICUBIC, False),
              ((2, 1, 8, 7), [3, 5], BICUBIC, True),
              ((1, 2, 3, 4, 5), [5, 3, 7], NEAREST, False),
              ((1, 2, 3, 4, 5), [5, 3, 7], LINEAR, False),
              ((1, 2, 3, 4, 5), [5, 6, 2], LINEAR, True)]
    for xs, sz, mode, ac in interp:
        nd = len(sz)
        tm = tmode[(nd, mode)]
        add("interpolate", "%s %s size=%s align_corners=%d" % (lbl(xs), tm, sz, ac), [randn(*xs)],
            lambda k, x, nd=nd, sz=sz, mode=mode, ac=ac: k.interpolate(x, nd, sz, mode, ac),
            lambda x, sz=sz, tm=tm, ac=ac:
                F.interpolate(x, size=sz, mode=tm, align_corners=None if tm == "nearest" else ac))
    interp_scale = [((2, 3, 7), [1.7], NEAREST, False, False),
                    ((2, 3, 7), [1.7], LINEAR, False, False),
                    ((2, 3, 7), [2.5], LINEAR, False, True),
                    ((1, 2, 5, 6), [1.5, 0.7], NEAREST, False, False),
                    ((1, 2, 5, 6), [1.5, 0.7], NEAREST, False, True),
                    ((1, 2, 5, 6), [2.3, 1.4], LINEAR, False, False),
                    ((1, 2, 5, 6), [2.3, 1.4], LINEAR, True, False),
                    ((1, 2, 5, 6), [1.9, 2.0], BICUBIC, False, False),
                    ((1, 2, 5, 6), [1.9, 2.0], BICUBIC, False, True),
                    ((1, 2, 3, 4, 5), [1.5, 2.0, 0.8], LINEAR, False, False),
                    ((1, 2, 3, 4, 5), [1.5, 2.0, 0.8], NEAREST, False, False)]
    for xs, sf, mode, ac, rsf in interp_scale:
        nd = len(sf)
        tm = tmode[(nd, mode)]
        add("interpolate_scale", "%s %s scale=%s align_corners=%d recompute=%d" % (
            lbl(xs), tm, sf, ac, rsf), [randn(*xs)],
            lambda k, x, nd=nd, sf=sf, mode=mode, ac=ac, rsf=rsf:
                k.interpolate_scale(x, nd, sf, mode, ac, rsf),
            lambda x, sf=sf, tm=tm, ac=ac, rsf=rsf:
                F.interpolate(x, scale_factor=sf, mode=tm,
                              align_corners=None if tm == "nearest" else ac,
                              recompute_scale_factor=rsf))

    # -- losses
    R = {"mean": lib.KILN_REDUCTION_MEAN, "sum": lib.KILN_REDUCTION_SUM,
         "none": lib.KILN_REDUCTION_NONE}
    IGN = -(1 << 63)
    for ls, ts_, c in [((6, 5), (6,), 5), ((9, 3), (9,), 3), ((3, 4, 5), (3, 5), 4),
                       ((2, 7, 2, 3), (2, 2, 3), 7)]:
        for red in R:
            for ign, wt, smooth in [(None, False, 0.0), (2, False, 0.0), (None, True, 0.0),
                                    (None, False, 0.1), (1, True, 0.25)]:
                tgt = ints(c, *ts_)
                if ign is not None:
                    tgt.flat[::3] = ign  # every third row ignored
                inputs = [randn(*ls, scale=2), tgt] + ([unif(0.2, 2, c)] if wt else [])
                L = "%s %s ignore=%s weight=%d smoothing=%g" % (lbl(ls), red, ign, wt, smooth)
                add("cross_entropy_ex", L, inputs,
                    lambda k, x, t, w=None, ign=ign, s=smooth, red=red:
                        k.cross_entropy_ex(x, t, w, IGN if ign is None else ign, s, R[red]),
                    lambda x, t, w=None, ign=ign, s=smooth, red=red:
                        F.cross_entropy(x, t, w, ignore_index=-100 if ign is None else ign,
                                        reduction=red, label_smoothing=s), grad=[0])
                if smooth == 0.0:
                    add("nll_loss", L, [np.log(rng.dirichlet(np.ones(c), ls[:1] + ls[2:])
                                               ).astype(f32).transpose(
                                                   [0, len(ls) - 1] + list(range(1, len(ls) - 1)))
                                        .copy()] + inputs[1:],
                        lambda k, x, t, w=None, ign=ign, red=red:
                            k.nll_loss(x, t, w, IGN if ign is None else ign, R[red]),
                        lambda x, t, w=None, ign=ign, red=red:
                            F.nll_loss(x, t, w, ignore_index=-100 if ign is None else ign,
                                       reduction=red), grad=[0])
        add("cross_entropy", "%s mean" % lbl(ls), [randn(ls[0], c), ints(c, ls[0])],
            lambda k, x, t: k.cross_entropy(x, t, R["mean"]),
            lambda x, t: F.cross_entropy(x, t), grad=[0])
    for s, pw, wt in [((7,), False, False), ((4, 5), True, False), ((4, 5), True, True),
                      ((2, 3, 6), True, True)]:
        for red in R:
            inputs = [randn(*s, scale=3), unif(0, 1, *s)]
            inputs += [unif(0.3, 2, *s[-1:])] if wt else []
            inputs += [unif(0.3, 3, *s[-1:])] if pw else []

            def kbce(k, x, y, *rest, red=red, wt=wt, pw=pw):
                w = rest[0] if wt else None
                p = rest[-1] if pw else None
                return k.binary_cross_entropy_with_logits(x, y, w, p, R[red])

            def tbce(x, y, *rest, red=red, wt=wt, pw=pw):
                return F.binary_cross_entropy_with_logits(
                    x, y, rest[0] if wt else None, reduction=red,
                    pos_weight=rest[-1] if pw else None)
            # PyTorch differentiates neither weight nor pos_weight
            add("bce_with_logits", "%s %s weight=%d pos_weight=%d" % (lbl(s), red, wt, pw),
                inputs, kbce, tbce, grad=[0, 1], need=["binary_cross_entropy_with_logits"])
    for s in [(7,), (4, 5), (2, 3, 6)]:
        for red in R:
            a, b = randn(*s, scale=2), randn(*s, scale=2)
            for delta in (0.7, 1.0, 2.5):
                add("huber_loss", "%s %s delta=%g" % (lbl(s), red, delta), [a, b],
                    lambda k, a, b, d=delta, red=red: k.huber_loss(a, b, d, R[red]),
                    lambda a, b, d=delta, red=red: F.huber_loss(a, b, reduction=red, delta=d))
            for beta in (0.0, 0.5, 1.0):
                add("smooth_l1_loss", "%s %s beta=%g" % (lbl(s), red, beta), [a, b],
                    lambda k, a, b, bt=beta, red=red: k.smooth_l1_loss(a, b, bt, R[red]),
                    lambda a, b, bt=beta, red=red: F.smooth_l1_loss(a, b, reduction=red, beta=bt))
            add("mse_loss", "%s %s" % (lbl(s), red), [a, b],
                lambda k, a, b, red=red: k.mse_loss(a, b, R[red]),
                lambda a, b, red=red: F.mse_loss(a, b, reduction=red))
            for lt in (False, True):
                x = np.log(rng.dirichlet(np.ones(s[-1]), s[:-1])).astype(f32)
                t = rng.dirichlet(np.ones(s[-1]), s[:-1]).astype(f32)
                if lt:
                    t = np.log(t).astype(f32)
                add("kl_div", "%s %s log_target=%d" % (lbl(s), red, lt), [x, t],
                    lambda k, x, t, lt=lt, red=red: k.kl_div(x, t, lt, R[red]),
                    lambda x, t, lt=lt, red=red: F.kl_div(x, t, reduction=red, log_target=lt))

    # -- attention
    att = [((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6)), ((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)),
           ((3, 9, 5), (3, 4, 5), (3, 4, 3))]
    for qs, ks, vs in att:
        for causal, scale in [(False, 0.0), (True, 0.0), (False, 0.3)]:
            add("scaled_dot_product_attention", "%s causal=%d scale=%g" % (
                lbl(qs, ks, vs), causal, scale), [randn(*qs), randn(*ks), randn(*vs)],
                lambda k, q, kk, v, c=causal, s=scale: k.scaled_dot_product_attention(q, kk, v, c, s),
                lambda q, kk, v, c=causal, s=scale:
                    F.scaled_dot_product_attention(q, kk, v, is_causal=c, scale=s or None))
        L, S = qs[-2], ks[-2]
        bm = rng.random((L, S)) < 0.6
        bm[np.arange(L), rng.integers(0, S, L)] = True  # no query fully masked
        add("attention", "%s bool mask %dx%d" % (lbl(qs, ks, vs), L, S),
            [randn(*qs), randn(*ks), randn(*vs), bm],
            lambda k, q, kk, v, m: k.attention(q, kk, v, m, False, 0.0),
            lambda q, kk, v, m: F.scaled_dot_product_attention(q, kk, v, attn_mask=m),
            grad=[0, 1, 2])
        fm = randn(qs[0], 1, L, S) if len(qs) == 4 else randn(L, S)
        add("attention", "%s float mask %s" % (lbl(qs, ks, vs), lbl(fm.shape)),
            [randn(*qs), randn(*ks), randn(*vs), fm],
            lambda k, q, kk, v, m: k.attention(q, kk, v, m, False, 0.0),
            lambda q, kk, v, m: F.scaled_dot_product_attention(q, kk, v, attn_mask=m))
    add("scaled_dot_product_attention", "GQA 1x4x5x8,1x2x6x8,1x2x6x3",
        [randn(1, 4, 5, 8), randn(1, 2, 6, 8), randn(1, 2, 6, 3)],
        lambda k, q, kk, v: k.scaled_dot_product_attention(q, kk, v, False, 0.0),
        lambda q, kk, v: F.scaled_dot_product_attention(
            q, kk.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)))

    # -- reductions with a correction, and the common ones
    for s, axes, keep in [((11,), [0], False), ((4, 7), [1], True), ((3, 5, 6), [0, 2], False),
                          ((3, 5, 6), None, False)]:
        for corr in (0.0, 1.0, 2.0):
            L = "%s axes=%s correction=%g keepdim=%d" % (lbl(s), axes, corr, keep)
            na = 0 if axes is None else len(axes)
            add("var", L, [randn(*s, scale=2)],
                lambda k, x, a=axes, na=na, c=corr, kp=keep: k.var(x, na, a, c, kp),
                lambda x, a=axes, c=corr, kp=keep: torch.var(x, dim=a, correction=c, keepdim=kp))
            add("std", L, [randn(*s, scale=2)],
                lambda k, x, a=axes, na=na, c=corr, kp=keep: k.std(x, na, a, c, kp),
                lambda x, a=axes, c=corr, kp=keep: torch.std(x, dim=a, correction=c, keepdim=kp))

        def kstdm(k, x, a=axes, kp=keep):
            o = Out()
            sd = k.std_mean(x, 0 if a is None else len(a), a, 1.0, kp, o)
            return sd, o.t
        add("std_mean", "%s axes=%s keepdim=%d" % (lbl(s), axes, keep), [randn(*s)], kstdm,
            lambda x, a=axes, kp=keep: torch.std_mean(x, dim=a, keepdim=kp))
        na = 0 if axes is None else len(axes)
        for name, tf in [("sum", torch and torch.sum), ("mean", torch and torch.mean),
                         ("prod", None), ("max", torch and torch.amax),
                         ("min", torch and torch.amin)]:
            if name == "prod":
                # torch.prod takes one dim: a product over all or over one axis
                if axes is not None and len(axes) > 1:
                    continue
                add("prod", "%s axes=%s keepdim=%d" % (lbl(s), axes, keep),
                    [away(*s, lo=0.7, hi=1.3)],
                    lambda k, x, a=axes, na=na, kp=keep: k.prod(x, na, a, kp),
                    lambda x, a=axes, kp=keep:
                        torch.prod(x) if a is None else torch.prod(x, a[0], keepdim=kp))
                continue
            add(name, "%s axes=%s keepdim=%d" % (lbl(s), axes, keep), [randn(*s)],
                lambda k, x, n=name, a=axes, na=na, kp=keep: getattr(k, n)(x, na, a, kp),
                lambda x, tf=tf, a=axes, kp=keep: tf(x) if a is None else tf(x, a, keepdim=kp))
        if axes is None or len(axes) == 1:
            for name, tf in [("argmax", torch and torch.argmax), ("argmin", torch and torch.argmin)]:
                add(name, "%s axes=%s keepdim=%d" % (lbl(s), axes, keep), [randn(*s)],
                    lambda k, x, n=name, a=axes, na=na, kp=keep: getattr(k, n)(x, na, a, kp),
                    lambda x, tf=tf, a=axes, kp=keep:
                        tf(x) if a is None else tf(x, a[0], keepdim=kp))

    # -- einsum
    ein = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
           ("i,j->ij", [(5,), (3,)]), ("ii->i", [(4, 4)]), ("ii->", [(5, 5)]),
           ("ij->ji", [(3, 7)]), ("ij->", [(3, 7)]), ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
           ("bhqd,bhkd->bhqk", [(2, 3, 5, 4), (2, 3, 6, 4)]), ("ijk,jl,k->il", [(3, 4, 5), (4, 2), (5,)]),
           ("ij,ij->i", [(4, 6), (4, 6)]), ("ba,ca", [(3, 5), (4, 5)])]
    for sub, shapes in ein:
        add("einsum", "'%s' %s" % (sub, lbl(*shapes)), [randn(*s) for s in shapes],
            lambda k, *xs, sub=sub: k.einsum(sub, len(xs), list(xs)),
            lambda *xs, sub=sub: torch.einsum(sub, *xs))

    # -- a few more that ports use everywhere
    for s, ax in [((4, 7), 1), ((3, 5, 6), 0), ((2, 3, 13), -1)]:
        add("softmax", "%s axis=%d" % (lbl(s), ax), [randn(*s, scale=3)],
            lambda k, x, ax=ax: k.softmax(x, ax), lambda x, ax=ax: torch.softmax(x, ax))
        add("log_softmax", "%s axis=%d" % (lbl(s), ax), [randn(*s, scale=3)],
            lambda k, x, ax=ax: k.log_softmax(x, ax), lambda x, ax=ax: torch.log_softmax(x, ax))
    for s, n in [((4, 7), 1), ((2, 3, 5), 2), ((3, 9), 2)]:
        add("layer_norm", "%s last %d axes" % (lbl(s), n),
            [randn(*s, scale=2), unif(0.5, 1.5, *s[-n:]), randn(*s[-n:])],
            lambda k, x, w, b, n=n: k.layer_norm(x, n, w, b, 1e-5),
            lambda x, w, b: F.layer_norm(x, w.shape, w, b, 1e-5))
    for s in [(5, 3), (4, 3, 6), (2, 4, 3, 5)]:
        c = s[1]
        add("batch_norm", "%s training" % lbl(s), [randn(*s, scale=2), unif(0.5, 1.5, c), randn(c)],
            lambda k, x, w, b: k.batch_norm(x, None, None, w, b, True, 0.1, 1e-5),
            lambda x, w, b: F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5))
    for a, b in [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 5), (3, 5, 2)), ((7,), (7, 3))]:
        add("matmul", lbl(a, b), [randn(*a), randn(*b)], lambda k, x, y: k.matmul(x, y),
            lambda x, y: torch.matmul(x, y))
    for xs, o, bias in [((5, 4), 3, True), ((2, 3, 7), 6, False)]:
        add("linear", "%s out=%d bias=%d" % (lbl(xs), o, bias),
            [randn(*xs), randn(o, xs[-1])] + ([randn(o)] if bias else []),
            lambda k, x, w, b=None: k.linear(x, w, b), lambda x, w, b=None: F.linear(x, w, b))
    PAD = {"reflect": lib.KILN_PAD_REFLECT, "replicate": lib.KILN_PAD_REPLICATE,
           "circular": lib.KILN_PAD_CIRCULAR}
    for s, pads in [((2, 3, 7), [0, 0, 0, 0, 2, 3]), ((1, 2, 5, 6), [0, 0, 0, 0, 1, 2, 3, 1])]:
        # torch's pad lists the last axis first
        tp = []
        for d in reversed(range(len(s))):
            tp += pads[2 * d: 2 * d + 2]
        tp = tp[:2 * (len(s) - 2)]
        for mode in PAD:
            add("pad_mode", "%s %s pads=%s" % (lbl(s), mode, pads), [randn(*s)],
                lambda k, x, p=pads, m=PAD[mode]: k.pad_mode(x, p, m),
                lambda x, tp=tp, m=mode: F.pad(x, tp, mode=m))
        add("pad", "%s constant 0.5 pads=%s" % (lbl(s), pads), [randn(*s)],
            lambda k, x, p=pads: k.pad(x, p, 0.5),
            lambda x, tp=tp: F.pad(x, tp, value=0.5))
    for s, ax, size, step in [((10,), 0, 3, 2), ((3, 9), 1, 4, 4), ((5, 4), 0, 2, 1)]:
        add("unfold", "%s axis=%d size=%d step=%d" % (lbl(s), ax, size, step), [randn(*s)],
            lambda k, x, a=(ax, size, step): k.unfold(x, *a),
            lambda x, a=(ax, size, step): x.unfold(*a))
    for s, reps in [((3, 4), [2, 3]), ((2, 3), [2, 1, 2])]:
        add("repeat", "%s reps=%s" % (lbl(s), reps), [randn(*s)],
            lambda k, x, r=reps: k.repeat(x, len(r), r), lambda x, r=reps: x.repeat(*r))
    for s, r, ax in [((3, 4), 2, 0), ((2, 5), 3, 1)]:
        add("repeat_interleave", "%s repeats=%d axis=%d" % (lbl(s), r, ax), [randn(*s)],
            lambda k, x, r=r, ax=ax: k.repeat_interleave(x, r, ax),
            lambda x, r=r, ax=ax: torch.repeat_interleave(x, r, ax))
    for s, off, a1, a2 in [((4, 6), 1, 0, 1), ((3, 5, 5), -1, 1, 2), ((4, 3, 5), 0, 0, 2)]:
        add("diagonal", "%s offset=%d axes=%d,%d" % (lbl(s), off, a1, a2), [randn(*s)],
            lambda k, x, a=(off, a1, a2): k.diagonal(x, *a),
            lambda x, a=(off, a1, a2): torch.diagonal(x, *a))
    for s in [(4, 5), (2, 3, 4)]:
        m = rng.random(s[-1:]) < 0.5
        add("masked_fill", "%s mask=%s" % (lbl(s), lbl(m.shape)), [randn(*s), m],
            lambda k, x, m: k.masked_fill(x, m, -2.5), lambda x, m: x.masked_fill(m, -2.5))
        add("where", lbl(s), [(rng.random(s) < 0.5), randn(*s), randn(*s[-1:])],
            lambda k, c, a, b: k.where(c, a, b), lambda c, a, b: torch.where(c, a, b))
    # -- edge values: ties, NaN, halves, extremes, integers
    def tied(*s):
        """Small integers as floats: many ties."""
        return rng.integers(-3, 4, s).astype(f32)

    def with_nan(a):
        a = a.copy()
        a.flat[rng.choice(a.size, max(1, a.size // 6), replace=False)] = np.nan
        return a
    for s, ax in [((17,), 0), ((4, 9), 1)]:
        for desc in (False, True):
            L = lbl(s) + " axis=%d desc=%d" % (ax, desc)
            # stable on both sides, so ties keep their order; NaN sorts last
            # ascending and first descending in both
            for what, gen in [("ties", tied), ("NaN", lambda *s: with_nan(randn(*s)))]:
                add("sort", L + " " + what, [gen(*s)], lambda k, x, ax=ax, d=desc: k.sort(x, ax, d),
                    lambda x, ax=ax, d=desc:
                        torch.sort(x, dim=ax, descending=d, stable=True).values)
                add("argsort", L + " " + what, [gen(*s)],
                    lambda k, x, ax=ax, d=desc: k.argsort(x, ax, d),
                    lambda x, ax=ax, d=desc: torch.argsort(x, dim=ax, descending=d, stable=True))
        # topk's order among ties (NaNs among themselves too) is unspecified in
        # PyTorch, and with it which element each gradient goes to: values only
        add("topk", lbl(s) + " k=3 axis=%d ties (values)" % ax, [tied(*s)],
            lambda k, x, ax=ax: k.topk(x, 3, ax, True, None),
            lambda x, ax=ax: torch.topk(x, 3, dim=ax).values, grad=[])
        add("topk", lbl(s) + " k=3 axis=%d NaN (values)" % ax, [with_nan(randn(*s))],
            lambda k, x, ax=ax: k.topk(x, 3, ax, True, None),
            lambda x, ax=ax: torch.topk(x, 3, dim=ax).values, grad=[])
        # cummax splits a tie's gradient evenly (kiln.h), PyTorch gives it to
        # one index: values only; NaN propagates from where it appears in both
        for name in ("cummax", "cummin"):
            add(name, lbl(s) + " axis=%d ties (values)" % ax, [tied(*s)],
                lambda k, x, n=name, ax=ax: getattr(k, n)(x, ax),
                lambda x, n=name, ax=ax: getattr(torch, n)(x, ax).values, grad=[])
            add(name, lbl(s) + " axis=%d NaN (values)" % ax, [with_nan(randn(*s))],
                lambda k, x, n=name, ax=ax: getattr(k, n)(x, ax),
                lambda x, n=name, ax=ax: getattr(torch, n)(x, ax).values, grad=[])
        # amax/amin share a tie's gradient evenly, as kiln_max and kiln_min do;
        # argmax and argmin take the first extreme in both
        add("max", lbl(s) + " axis=%d ties" % ax, [tied(*s)], lambda k, x, ax=ax: k.max(x, 1, [ax], False),
            lambda x, ax=ax: torch.amax(x, ax))
        add("min", lbl(s) + " axis=%d ties" % ax, [tied(*s)], lambda k, x, ax=ax: k.min(x, 1, [ax], False),
            lambda x, ax=ax: torch.amin(x, ax))
        add("argmax", lbl(s) + " axis=%d ties" % ax, [tied(*s)],
            lambda k, x, ax=ax: k.argmax(x, 1, [ax], False), lambda x, ax=ax: torch.argmax(x, ax))
        add("argmin", lbl(s) + " axis=%d ties" % ax, [tied(*s)],
            lambda k, x, ax=ax: k.argmin(x, 1, [ax], False), lambda x, ax=ax: torch.argmin(x, ax))
    # maximum/minimum give each side half of a tie's gradient in both
    for name in ("maximum", "minimum"):
        add(name, "5x6,6 ties", [tied(5, 6), tied(6)], lambda k, a, b, n=name: getattr(k, n)(a, b),
            lambda a, b, n=name: getattr(torch, n)(a, b))
    # scatter_reduce amax/amin with ties: kiln.h and PyTorch both share the
    # gradient evenly among the tied elements, self included with
    # include_self. Without include_self PyTorch still counts self in the
    # divisor when it happens to equal the result (and then gives it
    # nothing, so the shares sum to less than 1): there self is kept out of
    # reach (10 beyond every source value), and only the sources tie.
    for rname, rk, far in [("amax", lib.KILN_SCATTER_AMAX, -10.0),
                           ("amin", lib.KILN_SCATTER_AMIN, 10.0)]:
        add("scatter_reduce", "3x4 axis=0 index=9x4 %s include_self=1 ties" % rname,
            [tied(3, 4), ints(3, 9, 4), tied(9, 4)],
            lambda k, x, i, s, rk=rk: k.scatter_reduce(x, 0, i, s, rk, True),
            lambda x, i, s, rn=rname: torch.scatter_reduce(x, 0, i, s, rn, include_self=True))
        # the smallest such case: place 0 holds 1 and gets two sources of 1
        add("scatter_reduce", "3 axis=0 index=5 %s include_self=1 self=[1,2,0] src=[1,1,2,1,-1] "
            "index=[0,0,1,1,2]" % rname,
            [np.array([1, 2, 0], f32) * (1 if rname == "amax" else -1),
             np.array([0, 0, 1, 1, 2], np.int64),
             np.array([1, 1, 2, 1, -1], f32) * (1 if rname == "amax" else -1)],
            lambda k, x, i, s, rk=rk: k.scatter_reduce(x, 0, i, s, rk, True),
            lambda x, i, s, rn=rname: torch.scatter_reduce(x, 0, i, s, rn, include_self=True))
        add("scatter_reduce", "5x4 axis=0 index=7x4 %s include_self=0 ties (sources)" % rname,
            [tied(5, 4) + f32(far), ints(5, 7, 4), tied(7, 4)],
            lambda k, x, i, s, rk=rk: k.scatter_reduce(x, 0, i, s, rk, False),
            lambda x, i, s, rn=rname: torch.scatter_reduce(x, 0, i, s, rn, include_self=False))
    # max pooling: the first maximum of a window in both (PyTorch's CPU loop
    # takes a later one only when it is strictly greater)
    def kmpt(k, x):
        o = Out()
        v = k.max_pool2d_ex(x, [3, 3], [2, 2], [1, 1], [1, 1], True, o)
        return v, o.t
    add("max_pool2d", "2x2x9x8 k=3 stride=2 pad=1 ceil=1 ties +indices", [tied(2, 2, 9, 8)], kmpt,
        lambda x: F.max_pool2d(x, 3, 2, 1, 1, True, return_indices=True))
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -0.0, 0.0, 1e7 + 0.5, -3.49999],
                      dtype=f32)
    add("round", "halves (to even)", [halves], lambda k, x: k.round(x), lambda x: torch.round(x))
    add("trunc", "halves", [halves], lambda k, x: k.trunc(x), lambda x: torch.trunc(x))
    # erfc far out: values down to 1e-37, checked relatively (no atol)
    add("erfc", "x in [3, 9], relative", [unif(3, 9, 20)], lambda k, x: k.erfc(x),
        lambda x: torch.erfc(x), rtol=1e-5, atol=0.0)
    ni = np.array([-np.inf, -np.inf, 5.0, -np.inf, 80.0, -80.0], dtype=f32)
    add("logaddexp", "-inf and large", [ni, np.array([-np.inf, 3.0, -np.inf, -np.inf, 80.0, 79.0],
                                                     dtype=f32)],
        lambda k, a, b: k.logaddexp(a, b), lambda a, b: torch.logaddexp(a, b), grad=[])
    add("logcumsumexp", "3x20 scale 60", [randn(3, 20, scale=60)],
        lambda k, x: k.logcumsumexp(x, 1), lambda x: torch.logcumsumexp(x, 1))
    add("softmax", "3x20 scale 60", [randn(3, 20, scale=60)], lambda k, x: k.softmax(x, 1),
        lambda x: torch.softmax(x, 1))
    add("bce_with_logits", "4x5 |x| up to 60, sum", [randn(4, 5, scale=30), unif(0, 1, 4, 5)],
        lambda k, x, y: k.binary_cross_entropy_with_logits(x, y, None, None, R["sum"]),
        lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="sum"),
        need=["binary_cross_entropy_with_logits"])
    # every row ignored: a mean of nothing, NaN in both (no gradient compared)
    add("cross_entropy_ex", "4x3 all ignored, mean", [randn(4, 3), np.full(4, 1, np.int64)],
        lambda k, x, t: k.cross_entropy_ex(x, t, None, 1, 0.0, R["mean"]),
        lambda x, t: F.cross_entropy(x, t, ignore_index=1), grad=[])
    # integers: floor division and both remainders, signs mixed, zero results
    ia = rng.integers(-20, 21, (4, 6)).astype(np.int32)
    ib = (rng.integers(1, 6, (4, 6)) * rng.choice([-1, 1], (4, 6))).astype(np.int32)
    ia[0, :] = ib[0, :] * 3  # exact multiples
    for name, tf in [("div", torch and torch.floor_divide), ("floor_divide", torch and torch.floor_divide),
                     ("mod", torch and torch.remainder), ("fmod", torch and torch.fmod),
                     ("trunc_divide", lambda a, b: torch.div(a, b, rounding_mode="trunc"))]:
        add(name, "4x6 i32", [ia, ib], lambda k, a, b, n=name: getattr(k, n)(a, b),
            lambda a, b, tf=tf: tf(a, b))
    add("fmod", "exact multiples f32", [ia.astype(f32), ib.astype(f32)],
        lambda k, a, b: k.fmod(a, b), lambda a, b: torch.fmod(a, b), grad=[])
    add("mod", "exact multiples f32", [ia.astype(f32), ib.astype(f32)],
        lambda k, a, b: k.mod(a, b), lambda a, b: torch.remainder(a, b), grad=[])
    for name in ("cumsum", "cumprod"):
        add(name, "3x7 i32 (gives i64)", [rng.integers(-3, 4, (3, 7)).astype(np.int32)],
            lambda k, x, n=name: getattr(k, n)(x, 1), lambda x, n=name: getattr(torch, n)(x, 1))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lib", nargs="?", default="bazel-bin/libkiln.so")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("-k", dest="filter", default=None, help="only cases whose op and shape label contain this")
    ap.add_argument("--kiln-only", action="store_true", help="run kiln's side only (no torch)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print("seed %d (repeat with --seed %d)" % (seed, seed))
    rng = np.random.default_rng(seed)
    wrng = np.random.default_rng(seed + 1)
    global lib
    lib = Lib(args.lib, HEADER)
    torch = F = None
    if not args.kiln_only:
        import torch
        import torch.nn.functional as F
        import warnings
        warnings.filterwarnings("ignore", message="reduction: 'mean' divides")  # kl_div's
        torch.manual_seed(seed)
        print("torch %s, numpy %s" % (torch.__version__, np.__version__))

    cases = build_cases(rng, torch, F)
    missing = sorted({n for c in cases for n in c.need if not lib.has(n)})
    passed = failed = known = 0
    t0 = time.time()
    for c in cases:
        if args.filter and args.filter not in c.op + " " + c.label:
            continue
        if any(not lib.has(n) for n in c.need):
            continue
        name = "%-28s %-60s" % (c.op, c.label)
        drawn = {}

        def weights(shape):
            # one W per case, the same for kiln and torch
            if shape not in drawn:
                drawn[shape] = wrng.standard_normal(shape).astype(np.float32)
            return drawn[shape]
        try:
            kout, kgrad = run_kiln(lib, c, weights)
        except Exception as e:  # noqa: BLE001: a case that cannot run is a failure
            print("%s kiln error: %s FAIL%s" % (name, e, " (known: %s)" % c.known if c.known else ""))
            if c.known:
                known += 1
            else:
                failed += 1
            continue
        if args.kiln_only:
            print("%s ran: %s" % (name, " ".join(str(o.shape) for o in kout)))
            passed += 1
            continue
        try:
            tout, tgrad = run_torch(torch, c, weights)
        except Exception:
            print("%s torch error FAIL" % name)
            traceback.print_exc()
            failed += 1
            continue
        worst_abs = worst_rel = 0.0
        ok, notes = True, []
        pairs = [("out%d" % i if len(kout) > 1 else "out", a, b) for i, (a, b) in
                 enumerate(zip(kout, tout))]
        pairs += [("grad%d" % j, a, b) for j, a, b in zip(c.grad, kgrad, tgrad)]
        for what, a, b in pairs:
            if a is None:
                a = np.zeros_like(b)  # kiln gives no gradient where none flows
            ea, er, good, note = compare(a, b, c.rtol, c.atol)
            worst_abs, worst_rel = max(worst_abs, ea), max(worst_rel, er)
            if not good:
                ok = False
                notes.append("%s %s" % (what, note or "abs %.3g" % ea))
        verdict = "PASS" if ok else "FAIL"
        if c.known:
            verdict = "XPASS (known: %s)" % c.known if ok else "KNOWN-FAIL (%s)" % c.known
            known += 1
        elif ok:
            passed += 1
        else:
            failed += 1
        print("%s abs %.2e rel %.2e %s%s" % (name, worst_abs, worst_rel, verdict,
                                             "" if ok else ": " + "; ".join(notes)))
        sys.stdout.flush()
    print("(%.1f s)" % (time.time() - t0))
    if missing:
        print("not in kiln.h (skipped): %s" % ", ".join(missing))
    print("%d passed, %d failed%s" % (passed, failed, ", %d known failures" % known if known else ""))
    sys.exit(1 if failed else 0)


lib = None

if __name__ == "__main__":
    main()
