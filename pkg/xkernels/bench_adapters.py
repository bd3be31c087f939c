"""`xkernels bench --family adapters [--framework torch|jax|cupy|numpy|all]`: one kernel, every
framework.

(a) Kernel time. rmsnorm 32768x8192, silu_and_mul 8192x(2x14336) and softmax 32768x8192 through
each framework's adapter into a preallocated output (JAX: a donated one, which XLA reuses), timed
the same way for all: the wall time of N calls queued back to back and one synchronisation at the
end (the framework's own), N enough for >= 50 ms of kernels so that the host's enqueueing hides
behind them and the final sync weighs < 1%; frameworks interleaved round by round, the median of
7 rounds. Also each framework's kernel durations as the GPU recorded them (CUPTI through
torch.profiler: the kernel alone, without the framework's queueing), and from PyTorch CUDA events
around CUDA-graph replays (the other families' timer).
(b) Host cost per call, 1x4096 rmsnorm: a host loop of 5000 calls synchronised at the end, in
each framework xkernels next to the framework's own way (F.rms_norm; a jax.jit'ed jnp composite;
a CuPy ReductionKernel + ElementwiseKernel, and CuPy ufuncs; a NumPy composite), impls
interleaved over 7 rounds, the median.

Without a GPU: the host path at small shapes for torch, jax and numpy (CuPy needs a GPU). Every
xkernels output is checked (first and last rows against the float64 reference) before it is
timed. Rows go to DIR/adapters-<gpu>.jsonl.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import bench
from .ops import OPS

FRAMEWORKS = ("torch", "jax", "cupy", "numpy")
KERNEL_CASES = [("rmsnorm", (32768, 8192)), ("silu_and_mul", (8192, 2 * 14336)),
                ("softmax", (32768, 8192))]
OVERHEAD_SHAPE = (1, 4096)
EPS = 1e-6
ATTRS = {"rmsnorm": {"eps": EPS}, "silu_and_mul": {}, "softmax": {"scale": 1.0}}
CHECK_ROWS = 8
TABLE = ("op", "shape", "framework", "impl", "ms", "us/call", "ratio", "kernel ms",
         "kernel ratio", "note")


# --------------------------------------------------------------------------------------------
# The frameworks: data, sync, the xkernels call and the native ways.


class Framework:
    name = ""
    path = ""  # what a call goes through, printed at the start

    def __init__(self, gpu: bool, dtype: str):
        self.gpu = gpu
        self.dtype = dtype

    def randn(self, shape):  # a new random array of the bench dtype
        raise NotImplementedError

    def empty_poisoned(self, shape):  # NaN everywhere (all bits set)
        raise NotImplementedError

    def host(self, a) -> np.ndarray:  # float64 copy on the host
        raise NotImplementedError

    def sync(self, last=None) -> None:
        raise NotImplementedError

    def xkernels(self, op: str, ins: list, out) -> tuple[Callable[[], Any], Callable[[], Any]]:
        """(call, result): call() runs the op into `out` (or what stands for it); result() is the
        output after the last call."""
        fn = getattr(self.module(), op)
        attrs = ATTRS[op]
        return (lambda: fn(*ins, **attrs, out=out)), (lambda: out)

    def overhead(self, x, w) -> list[tuple[str, str, Callable[[], Any]]]:
        """(impl, what, call) of xkernels and the framework's own ways at the tiny shape."""
        xk = self.module()
        out = self.empty_poisoned(x.shape)
        return [("xkernels", f"{self.module().__name__}.rmsnorm(x, w)",
                 lambda: xk.rmsnorm(x, w, EPS)),
                ("xkernels (out=)", "into a preallocated out", lambda: xk.rmsnorm(x, w, EPS, out=out))]

    def module(self):
        return importlib.import_module(f"xkernels.{self.name}")


def _bf16_np():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def _np_dtype(name: str):
    return _bf16_np() if name == "bf16" else np.dtype({"fp16": "float16", "fp32": "float32"}[name])


class Torch(Framework):
    name = "torch"

    @property
    def path(self):
        where = "CUDA kernel on torch's current stream" if self.gpu else "host implementation"
        return ("xkernels.torch.<op>(..., out=) -> the TVM-FFI function (torch's DLPack C "
                f"exchange: no copy, stream from torch) -> {where}")

    def __init__(self, gpu, dtype):
        super().__init__(gpu, dtype)
        import torch

        self.torch = torch
        self.tdtype = getattr(torch, bench.DTYPES[dtype][0])
        self.dev = "cuda" if gpu else "cpu"

    def randn(self, shape):
        return self.torch.randn(shape, dtype=self.tdtype, device=self.dev)

    def empty_poisoned(self, shape):
        return self.torch.full(shape, float("nan"), dtype=self.tdtype, device=self.dev)

    def host(self, a):
        return a.detach().double().cpu().numpy()

    def sync(self, last=None):
        if self.gpu:
            self.torch.cuda.synchronize()

    def overhead(self, x, w):
        import torch.nn.functional as F

        return [*super().overhead(x, w),
                ("native: F.rms_norm", "torch.nn.functional.rms_norm",
                 lambda: F.rms_norm(x, (x.shape[-1],), w, EPS))]


class Jax(Framework):
    name = "jax"

    @property
    def path(self):
        where = "CUDA kernel on XLA's stream" if self.gpu else "host implementation"
        return ("jax.jit -> XLA FFI custom call 'xkernels.<op>' (jax-tvm-ffi: the same TVM-FFI "
                f"function, buffers from XLA; out donated) -> {where}")

    def __init__(self, gpu, dtype):
        super().__init__(gpu, dtype)
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        self.device = jax.devices("gpu" if gpu else "cpu")[0]
        self.jdtype = {"bf16": jnp.bfloat16, "fp16": jnp.float16, "fp32": jnp.float32}[dtype]
        self.key = jax.random.PRNGKey(0)
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")

    def randn(self, shape):
        self.key, k = self.jax.random.split(self.key)
        with self.jax.default_device(self.device):
            return self.jax.random.normal(k, shape, self.jnp.float32).astype(self.jdtype)

    def empty_poisoned(self, shape):
        return self.jax.device_put(self.jnp.full(shape, self.jnp.nan, self.jdtype), self.device)

    def host(self, a):
        return np.asarray(a).astype(np.float64)

    def sync(self, last=None):
        if last is not None:
            self.jax.block_until_ready(last)

    def xkernels(self, op, ins, out):
        fn = functools.partial(getattr(self.module(), op), **ATTRS[op])
        # the output slot donated: XLA writes into it (no allocation per call), as out= does
        jitted = self.jax.jit(lambda *a: fn(*a[:-1]), donate_argnums=len(ins))
        state = {"out": out}

        def call():
            state["out"] = jitted(*ins, state["out"])
            return state["out"]

        return call, lambda: state["out"]

    def overhead(self, x, w):
        jnp = self.jnp
        xj = self.module()
        jitted = self.jax.jit(functools.partial(xj.rmsnorm, eps=EPS))

        def composite(x, w):
            xf = x.astype(jnp.float32)
            r = self.jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + EPS)
            return (xf * r * w.astype(jnp.float32)).astype(x.dtype)

        native = self.jax.jit(composite)
        return [("xkernels", "jax.jit(xkernels.jax.rmsnorm)", lambda: jitted(x, w)),
                ("xkernels (eager)", "xkernels.jax.rmsnorm(x, w), not under a jit of yours",
                 lambda: xj.rmsnorm(x, w, EPS)),
                ("native: jax.jit(jnp)", "jax.jit of a jnp composite (f32 math)",
                 lambda: native(x, w))]


class Cupy(Framework):
    name = "cupy"
    path = ("xkernels.cupy.<op>(..., out=) -> tvm_ffi.use_raw_stream(CuPy's current stream) -> "
            "the TVM-FFI function (DLPack, no copy) -> CUDA kernel")

    def __init__(self, gpu, dtype):
        super().__init__(gpu, dtype)
        import cupy

        self.cp = cupy
        self.npdtype = _np_dtype(dtype)
        self._keep = []

    def randn(self, shape):
        if importlib.util.find_spec("torch") is not None:  # no CuPy kernel needed (NVRTC)
            import torch

            t = torch.randn(shape, device="cuda", dtype=getattr(torch, bench.DTYPES[self.dtype][0]))
            torch.cuda.synchronize()
            self._keep.append(t)
            if self.dtype != "bf16":
                return self.cp.from_dlpack(t)
            return self.cp.from_dlpack(t.view(torch.int16)).view(self.npdtype)
        return self.cp.random.standard_normal(shape, dtype=self.cp.float32).astype(self.npdtype)

    def empty_poisoned(self, shape):
        a = self.cp.empty(shape, self.npdtype)
        a.data.memset_async(0xFF, a.nbytes)  # all bits set: NaN in every float dtype
        return a

    def host(self, a):
        return self.cp.asnumpy(a).astype(np.float64)

    def sync(self, last=None):
        self.cp.cuda.get_current_stream().synchronize()

    def overhead(self, x, w):
        cp = self.cp
        rstd = cp.ReductionKernel(
            "T x", "float32 r", "float(x) * float(x)", "a + b",
            f"r = rsqrt(a / (float)(_in_ind.size() / _out_ind.size()) + {EPS!r}f)", "0",
            "xkernels_bench_rms_rstd")
        scale = cp.ElementwiseKernel("T x, float32 r, T w", "T y",
                                     "y = (T)((float)x * r * (float)w)", "xkernels_bench_rms_scale")

        def kernels():
            return scale(x, rstd(x, axis=-1, keepdims=True), w)

        def ufuncs():
            xf = x.astype(cp.float32)
            r = cp.reciprocal(cp.sqrt(cp.mean(xf * xf, axis=-1, keepdims=True) + EPS))
            return (xf * r * w.astype(cp.float32)).astype(x.dtype)

        return [*super().overhead(x, w),
                ("native: ReductionKernel+ElementwiseKernel", "two raw CuPy kernels", kernels),
                ("native: cupy ufuncs", "astype, mean, sqrt, reciprocal, multiplies", ufuncs)]


class Numpy(Framework):
    name = "numpy"
    path = ("xkernels.numpy.<op>(..., out=) -> the TVM-FFI function (DLPack, no copy; bfloat16 "
            "as a retagged uint16 view) -> host implementation")

    def __init__(self, gpu, dtype):
        super().__init__(False, dtype)  # NumPy arrays live on the host whatever the machine
        self.npdtype = _np_dtype(dtype)
        self.rng = np.random.default_rng(0)

    def randn(self, shape):
        return self.rng.standard_normal(shape, dtype=np.float32).astype(self.npdtype)

    def empty_poisoned(self, shape):
        return np.full(shape, np.nan, self.npdtype)

    def host(self, a):
        return np.asarray(a).astype(np.float64)

    def sync(self, last=None):
        pass

    def overhead(self, x, w):
        def composite():
            xf = x.astype(np.float32)
            r = 1 / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + np.float32(EPS))
            return (xf * r * w.astype(np.float32)).astype(x.dtype)

        return [*super().overhead(x, w), ("native: numpy", "NumPy composite (f32 math)",
                                          composite)]


CLASSES = {"torch": Torch, "jax": Jax, "cupy": Cupy, "numpy": Numpy}


def missing(fw: str, gpu: bool, dtype: str = "bf16") -> str | None:
    """Why a framework cannot run here, or None."""
    bf16 = ["ml_dtypes"] if dtype == "bf16" else []
    need = {"torch": ["torch"], "jax": ["jax", "jax_tvm_ffi"], "cupy": ["cupy", *bf16],
            "numpy": bf16}[fw]
    absent = [m for m in need if importlib.util.find_spec(m) is None]
    if absent:
        return f"not installed ({', '.join(absent)})"
    if fw == "cupy" and not gpu:
        return "needs a GPU"
    if fw == "jax" and gpu:
        import jax

        try:
            jax.devices("gpu")
        except RuntimeError:
            return "jax has no GPU backend here"
    return None


# --------------------------------------------------------------------------------------------
# Measuring.


def queued_ms(call: Callable[[], Any], sync: Callable[[Any], None], n: int) -> float:
    """ms per call of n calls queued back to back, synchronised once at the end."""
    sync(None)
    t0 = time.perf_counter()
    last = None
    for _ in range(n):
        last = call()
    sync(last)
    return (time.perf_counter() - t0) * 1e3 / n


def profiled_kernel_ms(call: Callable[[], Any], sync: Callable[[Any], None],
                       n: int) -> float | None:
    """The GPU's own time per call in xkernels kernels: CUPTI, through torch.profiler, records
    every kernel of the process whichever library launched it (the same primary context), so
    this is the kernel's duration with no framework's queueing or gaps in it. None without torch
    or when no xkernels kernel was recorded."""
    if importlib.util.find_spec("torch") is None:
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    sync(None)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        last = None
        for _ in range(n):
            last = call()
        sync(last)
    us = [e.time_range.elapsed_us() for e in prof.events()
          if e.device_type == DeviceType.CUDA and "xkernels" in e.name]
    return sum(us) / n / 1e3 if len(us) >= n else None


def loop_us(call: Callable[[], Any], sync: Callable[[Any], None], n: int) -> float:
    return queued_ms(call, sync, n) * 1e3


def check_rows(op: str, fw: Framework, ins: list, out, dtype: str) -> str | None:
    """None when the first and last rows of `out` match the float64 reference (as bench)."""
    spec = OPS[op]
    n = ins[0].shape[0]
    k = min(CHECK_ROWS, n)
    take = (lambda a: fw.host(a[:k]) if n <= k else
            np.concatenate([fw.host(a[:k]), fw.host(a[n - k:])]))
    args = [fw.host(a) if x.role == "column" else take(a) for x, a in zip(spec.inputs, ins)]
    ref = spec.reference()(*args, **ATTRS[op])
    got = take(out)
    rtol, atol = bench.TOL[dtype]
    if got.shape != ref.shape:
        return f"shape {got.shape}, expected {ref.shape}"
    if not np.isfinite(got).all():
        return "non-finite or unwritten elements"
    err = np.abs(got - ref)
    if (err > atol + rtol * np.abs(ref)).any():
        return f"max error {err.max():.3g}"
    rel = bench.rel_error(got, ref)
    return f"relative error {rel:.3g}" if rel > bench.REL_TOL[dtype] else None


class Run:
    def __init__(self, args, gpu: bool, device: str):
        self.args = args
        self.gpu = gpu
        self.device = device
        self.rows: list[dict] = []
        self.failed: list[str] = []
        self.path: Path | None = None
        self.versions = versions()
        self.date = time.strftime("%Y-%m-%d")

    def emit(self, fw: Framework | None, op, shape, impl, ms, host_us=None, note="", **kw):
        row = {"family": "adapters", "op": op, "shape": list(shape), "dtype": self.args.dtype,
               "impl": impl, "framework": fw.name if fw else None, "ms": ms, "host_us": host_us,
               "device": self.device if fw is None or fw.gpu else "cpu", "date": self.date,
               "versions": self.versions, "note": note, **kw}
        self.rows.append(row)
        us = "" if host_us is None else f" {host_us:.2f} us/call"
        print(f"  {op} {bench.fmt_shape(shape)} {row['framework']} {impl}: "
              f"{'-' if ms is None else f'{ms:.4f} ms'}{us}  {note}", file=sys.stderr, flush=True)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({k: v for k, v in row.items() if v is not None
                                    or k in ("ms", "host_us")}) + "\n")


def versions() -> dict[str, str]:
    out = bench.versions()
    for key, dists in (("jax", ("jax",)), ("jaxlib", ("jaxlib",)),
                       ("jax_tvm_ffi", ("jax-tvm-ffi",)), ("numpy", ("numpy",)),
                       ("ml_dtypes", ("ml_dtypes", "ml-dtypes")),
                       ("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy"))):
        v = bench._dist_version(*dists)
        if v is not None:
            out[key] = v
    return out


def _prepare(fw: Framework, op: str, shape, dtype: str, target_ms: float):
    """(call, calls per round, check failure or None) of the op through `fw` at `shape`."""
    spec = OPS[op]
    ins = [fw.randn((shape[-1],) if x.role == "column" else shape) for x in spec.inputs]
    call, result = fw.xkernels(op, ins, fw.empty_poisoned(spec.outputs[0].shape(shape)))
    fw.sync(call())
    bad = check_rows(op, fw, ins, result(), dtype)
    est = queued_ms(call, fw.sync, 3)
    return call, max(3, min(2000, math.ceil(target_ms / max(est, 1e-4)))), bad


def kernel_times(run: Run, fws: list[Framework]) -> None:
    quick = run.args.quick
    rounds = 3 if quick else 7
    target_ms = 20.0 if quick else 50.0
    for op, shape in KERNEL_CASES:
        if not run.gpu:
            shape = bench.host_shape(shape, bench.HOST_CAP_QUICK if quick else bench.HOST_CAP)
        nbytes = bench.bytes_moved(op, shape, bench.DTYPES[run.args.dtype][1])
        live = {}
        for fw in fws:
            if run.gpu and not fw.gpu:
                continue  # NumPy: the host path has no place among GPU kernel times
            try:
                live[fw.name] = (fw, *_prepare(fw, op, shape, run.args.dtype, target_ms))
            except Exception as e:  # noqa: BLE001 (a row, and exit status 1)
                run.emit(fw, op, shape, "xkernels", None, note=f"failed: {bench._error(e)}")
                run.failed.append(f"{op} {fw.name}: {bench._error(e)}")
        samples: dict[str, list[float]] = {k: [] for k in live}
        for _ in range(rounds):  # frameworks interleaved: compared within one stretch of time
            for name, (fw, call, n, _) in list(live.items()):
                try:
                    samples[name].append(queued_ms(call, fw.sync, n))
                except Exception as e:  # noqa: BLE001 (its row, and exit status 1)
                    del live[name]
                    run.emit(fw, op, shape, "xkernels", None, note=f"failed: {bench._error(e)}")
                    run.failed.append(f"{op} {name}: {bench._error(e)}")
        base = statistics.median(samples["torch"]) if "torch" in live else None
        kernel = {}  # the kernel's own duration per framework (CUPTI)
        if run.gpu:
            for name, (fw, call, _, _) in live.items():
                try:
                    kernel[name] = profiled_kernel_ms(call, fw.sync, 20)
                except Exception as e:  # noqa: BLE001 (the row says so)
                    print(f"  {op} {name}: profiler failed: {bench._error(e)}", file=sys.stderr)
        kbase = kernel.get("torch")
        for name, (fw, call, n, bad) in live.items():
            ms = statistics.median(samples[name])
            kms = kernel.get(name)
            kratio = kms / kbase if kms is not None and kbase else None
            if bad:
                run.failed.append(f"{op} {name}: CHECK FAILED: {bad}")
            ratio = None if base is None else ms / base
            run.emit(fw, op, shape, "xkernels", ms, gbps=bench.gbps(nbytes, ms), ratio=ratio,
                     check="failed" if bad else "ok", calls=n, kernel_ms=kms,
                     kernel_ratio=kratio,
                     note=(f"CHECK FAILED: {bad}; " if bad else "")
                     + f"{n} queued calls + 1 sync, median of {rounds} rounds"
                     + ("" if ratio is None else f"; {ratio:.3f}x torch's")
                     + ("" if kms is None else f"; kernel (CUPTI) {kms * 1e3:.1f} us"
                        + ("" if kratio is None else f", {kratio:.3f}x torch's")))
        if "torch" in live and run.gpu:  # the kernel's own time, as the other families measure
            fw, call, _, _ = live["torch"]
            try:
                ms, why = bench.time_gpu([call], min_ms=25.0 if quick else 100.0)
                run.emit(fw, op, shape, "xkernels (CUDA graph, events)", ms,
                         gbps=bench.gbps(nbytes, ms),
                         note="CUDA events around graph replays" + (f" ({why})" if why else ""))
            except Exception as e:  # noqa: BLE001
                run.emit(fw, op, shape, "xkernels (CUDA graph, events)", None,
                         note=f"failed: {bench._error(e)}")
        del live, samples
        for fw in fws:
            if isinstance(fw, Cupy):
                fw._keep.clear()
                fw.cp.get_default_memory_pool().free_all_blocks()
        if run.gpu and importlib.util.find_spec("torch") is not None:
            import torch

            torch.cuda.empty_cache()


def host_overhead(run: Run, fws: list[Framework]) -> None:
    calls = 1000 if run.args.quick else 5000
    rounds = 3 if run.args.quick else 7
    for fw in fws:
        try:
            x, w = fw.randn(OVERHEAD_SHAPE), fw.randn(OVERHEAD_SHAPE[-1:])
            impls = fw.overhead(x, w)
        except Exception as e:  # noqa: BLE001
            run.emit(fw, "rmsnorm", OVERHEAD_SHAPE, "xkernels", None, note=f"failed: {e}")
            run.failed.append(f"overhead {fw.name}: {bench._error(e)}")
            continue
        samples: dict[str, list[float]] = {i: [] for i, _, _ in impls}
        failed: dict[str, str] = {}
        for impl, _, call in impls:  # warm up (JIT compiles) and check xkernels' result
            try:
                for _ in range(50):
                    last = call()
                fw.sync(last)
                if impl.startswith("xkernels") and last is not None:
                    bad = check_rows("rmsnorm", fw, [x, w], last, run.args.dtype)
                    if bad:
                        failed[impl] = f"CHECK FAILED: {bad}"
            except Exception as e:  # noqa: BLE001
                failed[impl] = f"failed: {bench._error(e)}"
        for _ in range(rounds):
            for impl, _, call in impls:
                if impl not in failed:
                    try:
                        samples[impl].append(loop_us(call, fw.sync, calls))
                    except Exception as e:  # noqa: BLE001
                        failed[impl] = f"failed: {bench._error(e)}"
        best_native = min((statistics.median(samples[i]) for i, _, _ in impls
                           if i.startswith("native") and i not in failed), default=None)
        for impl, what, _ in impls:
            if impl in failed:
                run.emit(fw, "rmsnorm", OVERHEAD_SHAPE, impl, None, note=failed[impl])
                if impl.startswith("xkernels"):
                    run.failed.append(f"overhead {fw.name} {impl}: {failed[impl]}")
                continue
            us = statistics.median(samples[impl])
            ratio = us / best_native if best_native and impl.startswith("xkernels") else None
            run.emit(fw, "rmsnorm", OVERHEAD_SHAPE, impl, us / 1e3, host_us=us, ratio=ratio,
                     note=f"{what}; host loop x{calls}, synced at the end, median of {rounds} "
                          "rounds interleaved" + ("" if ratio is None else
                                                  f"; {ratio:.2f}x the best native"))


def format_table(rows: list[dict]) -> str:
    cells = [TABLE]
    for r in rows:
        ratio = r.get("ratio")
        cells.append((r["op"], bench.fmt_shape(r["shape"]), r["framework"] or "-", r["impl"],
                      bench._fmt(r["ms"], ".4f"), bench._fmt(r.get("host_us"), ".2f"),
                      bench._fmt(ratio, ".3f"), bench._fmt(r.get("kernel_ms"), ".4f"),
                      bench._fmt(r.get("kernel_ratio"), ".3f"),
                      ("FAILED " if r.get("check") == "failed" else "")
                      + ("failed" if r["ms"] is None else "")))
    widths = [max(len(c[j]) for c in cells) for j in range(len(TABLE))]
    return "\n".join("  ".join(c[j].rjust(widths[j]) if j in (4, 5, 6, 7, 8) else c[j].ljust(widths[j])
                               for j in range(len(TABLE))).rstrip() for c in cells)


def _gpu() -> tuple[bool, str]:
    """(a GPU is here, its name) from the first framework that can tell."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return True, torch.cuda.get_device_name(0)
    if importlib.util.find_spec("cupy") is not None:
        import cupy

        with contextlib.suppress(Exception):  # no driver: no GPU
            if cupy.cuda.runtime.getDeviceCount() > 0:
                name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
                return True, name.decode() if isinstance(name, bytes) else str(name)
    return False, "cpu"


def main(args) -> int:
    # torch, CuPy and JAX share the GPU in one process: JAX must not take 75% of it up front
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    gpu, device = _gpu()
    wanted = list(FRAMEWORKS) if args.framework in (None, "all") else [args.framework]
    fws: list[Framework] = []
    skipped = []
    for name in wanted:
        why = missing(name, gpu, args.dtype)
        if why is None:
            try:
                fws.append(CLASSES[name](gpu, args.dtype))
                continue
            except Exception as e:  # noqa: BLE001
                why = f"failed to start: {bench._error(e)}"
        skipped.append(f"{name} ({why})")
    if gpu:
        print(f"xkernels bench --family adapters: {device}, {args.dtype}"
              + (", quick" if args.quick else ""), flush=True)
    else:
        print("xkernels bench --family adapters: no GPU: running the HOST path at small shapes, "
              "timed on the host clock; these are not GPU numbers", flush=True)
    print("framework paths:", flush=True)
    for fw in fws:
        print(f"  {fw.name:<6} {fw.path}", flush=True)
    for s in skipped:
        print(f"  skipped: {s}", flush=True)
    if not fws:
        print("xkernels bench: no framework to run", file=sys.stderr)
        return 2
    run = Run(args, gpu, device)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        short = (bench.gpu_short_name(device) if gpu
                 else f"cpu-{bench.cpu_short_name(bench.cpu_info()['model'])}")
        run.path = out / f"adapters-{short}.jsonl"
        run.path.write_text("")
    from . import jit

    for m in sorted({OPS[op].module for op, _ in KERNEL_CASES}):
        jit.load(m)  # build outside the measurements
    interrupted = False
    try:
        print("[kernel time]", file=sys.stderr, flush=True)
        kernel_times(run, fws)
        print("[host overhead]", file=sys.stderr, flush=True)
        host_overhead(run, fws)
    except KeyboardInterrupt:
        interrupted = True
    if run.failed:
        print(f"\nxkernels FAILED {len(run.failed)} case(s):", flush=True)
        for f in run.failed:
            print(f"  {f}", flush=True)
    print(("\nhost path (CPU), not GPU numbers\n" if not gpu else "\n")
          + "ratio: kernel rows, ms / torch's ms; overhead rows, us / the framework's best "
            "native us\n" + format_table(run.rows), flush=True)
    return 130 if interrupted else 1 if run.failed else 0
