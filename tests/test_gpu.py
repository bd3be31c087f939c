"""The CUDA path: every op x dtype x shape (every kernel scope and vector width) against the
float64 reference; CUDA graphs, side streams, torch.compile, the C++ example. Skipped without a
GPU; run on the device."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import xkernels.torch as xt
from cases import DTYPES, check
from conftest import gpu
from xkernels.ops import ROW_OPS

pytestmark = gpu
ROOT = Path(__file__).resolve().parents[1]

# Widths chosen to reach each row-kernel scope for 16-bit (8 per vector), float32 (4) and
# unaligned (1 per vector) rows: group (<= 128 vectors), block (<= 2048), cluster (<= 16384),
# two-pass (beyond); plus 1 row, odd widths, padded rows, per-head views, unaligned pointers.
SHAPES = [
    ((1, 1), "contiguous"),
    ((1, 7), "contiguous"),
    ((3, 127), "contiguous"),
    ((1000, 128), "contiguous"),
    ((37, 4096), "contiguous"),
    ((65, 8192), "contiguous"),
    ((600, 4096), "contiguous"),  # blocks past a wave: RowKernelFlat, 128 (fp32: 256) x 4
    ((400, 3200), "contiguous"),  # the same, the last vectors past the row (400 and 800)
    ((300, 7000), "contiguous"),  # 256 x 4 over 875 vectors (fp32: 1750, RowKernel)
    ((200, 7000), "contiguous"),  # one to two waves of 875 vectors: RowKernelFlat, columns early
    ((200, 3500), "contiguous"),  # the same for fp32 (875 vectors of 4)
    ((300, 6000), "contiguous"),  # layernorm: 750 vectors over 192 threads x 4, via L1
    ((4, 28672), "contiguous"),  # elementwise, narrower vectors: 4 bytes (fp32: 8), as 1x28672
    ((1100, 6000), "contiguous"),  # elementwise throughput grids (each op's Throughput shape),
    ((1100, 6000), "strided"),  # their blocks' last threads past the row
    ((66000, 24), "contiguous"),  # rows past the grid's y limit (65535): row loops, scalars
    ((2, 4097), "contiguous"),
    ((2, 16385), "contiguous"),
    ((5, 20000), "contiguous"),
    ((200, 20000), "contiguous"),  # more rows than co-resident clusters: persistent loops
    ((3, 100000), "contiguous"),
    ((1, 262144), "contiguous"),
    ((9, 1000), "strided"),
    ((64, 8, 128), "heads"),
    ((33, 4096), "unaligned"),
    ((3, 127), "unaligned"),
]


@pytest.mark.parametrize("shape,layout", SHAPES, ids=[f"{s}-{l}" for s, l in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_cuda_matches_reference(op, dtype, shape, layout):
    check(op, shape, dtype, "cuda", layout)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "op", ["layernorm", "rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm"])
def test_norm_many_rows(op, dtype):
    """Grids of kManyRows (24576) rows or more of 769-1024 vectors (875: 7000 16-bit, 3500
    float32): for 16-bit rmsnorm (512 x 2) and layernorm (256 x 4, the last 149 threads past
    the row) the row read twice (kept in L2 for the reduction, then read again and written), as
    from kRereadRows (8192); for float32 RowKernelFlat 512 x 2, the columns loaded with the row;
    the fused ops 1024 x 1, the last 149 threads past the row."""
    check(op, (24577, 3500 if dtype == torch.float32 else 7000), dtype, "cuda")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "op", ["rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm", "softmax"])
def test_rows_2048_vectors_many_rows(op, dtype):
    """Grids of kRereadRows (8192) rows or more of 1537-2048 16-bit vectors (2000: 16000 values,
    the last 48 threads past the row): 16-bit rmsnorm's re-read RowKernelFlat 512 x 4, the fused
    ops' one-pass 512 x 4; softmax (the cluster path) as a neighbour."""
    check(op, (8193, 16000), dtype, "cuda")


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_norm_many_rows_strided_and_in_place(op):
    """The re-read kernels on rows padded by 16 elements (16-byte aligned, so the same kernel),
    then in place (out = input): each thread reads its vectors again before it overwrites them,
    and layernorm's shift (the row's first value) is read by every thread before the reduction's
    barrier, so before thread 0 writes it. Both against the contiguous call (test_norm_many_rows
    checks that against the reference)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(24577, 7016, generator=gen).to("cuda", torch.bfloat16)[:, :7000]
    cols = [torch.randn(7000, generator=gen).to("cuda", torch.bfloat16)
            for _ in range(2 if op == "layernorm" else 1)]
    fn = getattr(xt, op)
    want = fn(x.contiguous(), *cols)
    out = torch.full_like(x, float("nan"))
    assert torch.equal(fn(x, *cols, out=out), want)
    assert fn(x, *cols, out=x) is x
    assert torch.equal(x, want)


@pytest.mark.parametrize("cols", [2048, 3000, 4096, 5000, 7000, 10000, 16000])
@pytest.mark.parametrize("rows", [300, 1024])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "op", ["layernorm", "rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm", "gemma_fused_add_rmsnorm"])
def test_norm_one_wave_grids(op, dtype, rows, cols):
    """Grids of one wave of at most 8 rows per SM (row_kernel.h, LaunchOneWave: 265-1056 rows on
    an H100): each width a branch of it (<= 256 / 384 / 512 / 768 / 1024 / 1536 / 2048 16-byte
    vectors; 16-bit rmsnorm at 7000 the persistent RowKernelPipe, each block several rows)."""
    check(op, (rows, cols), dtype, "cuda")


@pytest.mark.parametrize("cols", [12288, 11000])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "gemma_fused_add_rmsnorm"])
def test_fused_add_rows_past_one_wave(op, dtype, cols):
    """16-bit fused-add rows of 1025-1536 vectors in grids past one wave (2000 rows): RowKernelFlat
    512 x 3, columns from memory; 11000 (1375 vectors) leaves the last threads' third vector past
    the row."""
    check(op, (2000, cols), dtype, "cuda")


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm", "fused_add_rmsnorm"])
def test_norm_many_rows_float32_weights(op):
    """The same grids with float32 columns for bf16 rows: their columns after the reduction."""
    check(op, (24577, 7000), torch.bfloat16, "cuda", weight_dtype=torch.float32)


@pytest.mark.parametrize("op", [n for n, o in ROW_OPS.items()
                                if any(x.role == "column" for x in o.inputs)])
@pytest.mark.parametrize("shape", [(3, 40), (5, 4096), (2, 50000)])
def test_cuda_float32_weights_with_bf16_input(op, shape):
    check(op, shape, torch.bfloat16, "cuda", weight_dtype=torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cols", [9, 4096, 40000, 262144, 524288])
def test_softmax_rows_of_neg_inf_and_long_rows(dtype, cols):
    x = torch.randn(4, cols, device="cuda").to(dtype)
    x[1] = float("-inf")
    x[2, ::2] = float("-inf")
    y = xt.softmax(x, scale=1.5)
    ref = torch.softmax(x[[0, 2, 3]].double() * 1.5, -1)
    assert torch.equal(y[1], torch.zeros_like(y[1]))
    err = (y[[0, 2, 3]].double() - ref).abs().max().item()
    assert err < {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 4e-3}[dtype], err
    assert torch.allclose(y[[0, 2, 3]].double().sum(-1), torch.ones(3, dtype=torch.float64,
                          device="cuda"), atol=cols * 1e-3 if dtype != torch.float32 else 1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cols", [2049, 32001, 50257])
def test_softmax_rows_not_16_byte_aligned(dtype, cols):
    """Rows whose starts are not 16-byte aligned (odd lengths: each row misaligned differently).
    out sharing every row's misalignment (a fresh out, in place, in place on strided rows) takes
    the head / vectors / tail kernel; an out a few elements off keeps the element-wise kernel.
    Tolerances: the float64 reference's, as for the other softmax tests."""
    rows = 300
    x = (torch.randn(rows, cols, device="cuda") * 3).to(dtype)
    x[5, : cols // 2] = float("-inf")
    x[7] = float("-inf")
    ref = torch.softmax(x.double() * 0.7, -1).nan_to_num(0.0)
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 4e-3}[dtype]

    def close(y, want=ref):
        err = (y.double() - want).abs().max().item()
        assert err < tol, err

    y = torch.full_like(x, float("nan"))
    assert xt.softmax(x, scale=0.7, out=y) is y
    close(y)
    assert torch.equal(y[7], torch.zeros_like(y[7]))
    z = x.clone()
    xt.softmax(z, scale=0.7, out=z)
    assert torch.equal(z, y)
    buf = torch.full((rows * cols + 3,), float("nan"), device="cuda", dtype=dtype)
    w = buf[3:].view(rows, cols)
    xt.softmax(x, scale=0.7, out=w)
    close(w)
    wide = torch.full((rows, cols + 5), float("nan"), device="cuda", dtype=dtype)
    v = wide[:, 2:cols + 2]
    v.copy_(x)
    xt.softmax(v, scale=0.7, out=v)
    close(v)
    assert wide[:, :2].isnan().all() and wide[:, cols + 2:].isnan().all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_rows_in_two_large_shares(dtype):
    """Rows split over 2 blocks with shares of more than 64 KB (16-bit 65537-131072, float32
    32769-65536), in grids past a wave: RowKernelSmem's bulk stores (thread stores on
    fast_memory). 131000 and 65000 leave the second share's last chunk partial."""
    check("softmax", (300, 65000 if dtype == torch.float32 else 131000), dtype, "cuda")


@pytest.mark.parametrize("rows,cols", [(1, 32768), (128, 32000), (128, 32768), (1024, 16392),
                                       (2048, 32768), (2049, 32000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_pairs_of_blocks(dtype, rows, cols):
    """Rows of 2049-4096 16-byte vectors in grids of up to 2048 rows: persistent pairs of blocks
    (16-bit 16392-32768, float32 8196-16384; 16392 leaves one vector for the second block's
    last thread group); 2049 rows take the wider clusters or RowKernelSmem (on fast_memory, the
    pairs again; float32 32000, 8000 vectors, the clusters of 8 below)."""
    check("softmax", (rows, cols), dtype, "cuda")


@pytest.mark.parametrize("rows,cols", [(300, 32776), (300, 50304), (2100, 65536)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_rows_of_4097_to_8192_vectors(dtype, rows, cols):
    """Rows of 4097-8192 16-byte vectors (16-bit 32776-65536, float32 half as many) past a wave:
    persistent clusters of 8 blocks on fast_memory (the H200), RowKernelSmem over 2 blocks
    elsewhere; 32776 leaves one vector past 4096, 50304 a short last share."""
    if dtype == torch.float32:
        cols //= 2
    check("softmax", (rows, cols), dtype, "cuda")


@pytest.mark.parametrize("rows,cols", [(1, 50257), (5, 50257), (140, 50257), (1, 60001),
                                       (2, 152064), (1, 256000)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softmax_latency_and_staged_rows(dtype, rows, cols):
    """Odd-length rows (each row misaligned differently) staged in shared memory: blocks of 1024
    threads for grids of a block per SM or fewer, 512 past it (140 rows); 16-bit 60001 and
    float32 rows of 50257+ are too long to stage (two passes over memory). Aligned rows of
    152064 / 256000 in a few rows: RowKernelSmem clusters of 5 / 8 blocks."""
    check("softmax", (rows, cols), dtype, "cuda")


@pytest.mark.parametrize("rows,cols", [(128, 9216), (128, 36864), (7, 12288), (200, 4100)])
@pytest.mark.parametrize("op", ["gelu_and_mul", "silu_and_mul", "gelu_tanh_and_mul", "gelu",
                                "silu", "add_bias_gelu", "mul_add"])
def test_latency_grids_spread_over_sms(op, rows, cols):
    """Latency grids of more blocks than SMs, their blocks held to ceil(blocks / SMs) per SM by
    dynamic shared memory (LaunchSpread: 128 x 9216, 1152 blocks at most 9 per SM), and
    gelu_and_mul's latency form up to 3 waves (128 x 36864); 7 x 12288 has fewer blocks than SMs
    (a plain launch); 200 x 4100 is not a multiple of 8 elements (2-byte accesses), each row's last
    block short."""
    check(op, (rows, cols), torch.bfloat16, "cuda")


@pytest.mark.parametrize("cols", [151936, 262208])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_rows_just_past_whole_chunks(cols, dtype):
    """Vocabulary-sized rows over clusters of RowKernelSmem: bf16 151936 over 2 blocks (shares of
    4.6 32 KB chunks: 5 of the ring's 6 slots), 262208 over 4 (4.004 chunks: each share's last
    chunk nearly empty; softmax's on fast_memory 2.67 chunks of 48 KB in a ring of 4), float32
    151936 over 4 (4.6 chunks; float32 262208: no shared-memory rows); grids past the clusters
    that fit, each taking many rows; softmax and rmsnorm against float64."""
    check("softmax", (300, cols), dtype, "cuda")
    check("rmsnorm", (300, cols), dtype, "cuda")


@pytest.mark.parametrize("cols", [128, 4096, 20000, 262144])
def test_norm_in_place_through_out(cols):
    x = torch.randn(7, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16)
    want = xt.rmsnorm(x, w)
    xt.rmsnorm(x, w, out=x)
    assert torch.equal(x, want)


def test_run_to_run_bitwise_deterministic():
    x = torch.randn(300, 20000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(20000, device="cuda", dtype=torch.bfloat16)
    for f in (lambda: xt.rmsnorm(x, w), lambda: xt.softmax(x), lambda: xt.layernorm(x, w, w)):
        assert torch.equal(f(), f())


def test_cuda_graph_capture_and_replay():
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.CUDAGraph()
    xt.rmsnorm(x, w)  # warm up (loads the module) outside capture
    xt.silu_and_mul(x)
    with torch.cuda.graph(g):
        y = xt.rmsnorm(x, w)
        z = xt.silu_and_mul(y)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        r.copy_(torch.randn_like(r))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, xt.rmsnorm(x, w))
        assert torch.equal(z, xt.silu_and_mul(y))


def test_side_stream_ordering():
    """The kernel runs on torch's current stream: queued after a long kernel on a side stream,
    it must see the data that stream wrote last."""
    s = torch.cuda.Stream()
    x = torch.zeros(512, 8192, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(8192, device="cuda", dtype=torch.bfloat16)
    src = torch.randn(512, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~tens of ms of spinning on s
        x.copy_(src)
        y = xt.rmsnorm(x, w)
    s.synchronize()
    assert torch.equal(y, xt.rmsnorm(src, w))


@pytest.mark.parametrize("cols", [20000, 32768, 131072, 140000])
def test_persistent_cluster_rows(cols):
    """Rows split over clusters, more rows than twice the clusters that fit: each cluster takes
    many rows, and its exchange buffers and mbarrier phases cycle. Softmax rows of 32768 take
    one block each, 131072 two, 140000 three (uneven shares), all in shared memory."""
    g = torch.Generator().manual_seed(cols)
    rows = 1500 if cols == 20000 else 600
    x = torch.randn(rows, cols, generator=g).to("cuda", torch.bfloat16)
    r = torch.randn(rows, cols, generator=g).to("cuda", torch.bfloat16)
    w = torch.randn(cols, generator=g).to("cuda", torch.bfloat16)
    xd, wd = x.double(), w.double()

    def close(got, want):
        err = (got.double() - want).abs() - 2e-2 * want.abs()
        assert err.max().item() <= 2e-2, err.max().item()

    close(xt.softmax(x, scale=0.7), torch.softmax(xd * 0.7, -1))
    close(xt.rmsnorm(x, w), xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd)
    close(xt.layernorm(x + 3, w, w), torch.nn.functional.layer_norm((x + 3).double(), (cols,), wd, wd, 1e-5))
    y, res = x.clone(), r.clone()
    xt.fused_add_rmsnorm(y, res, w)
    s = (x + r).double()  # bf16 sum rounded, as the op keeps it
    close(res, s)
    sd = res.double()
    close(y, sd * torch.rsqrt(sd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd)
    # Strided rows written in place: each block stages its share of the next row while it
    # writes the current one.
    big = torch.randn(rows, cols + 64, generator=g).to("cuda", torch.bfloat16)
    v = big[:, 32:32 + cols]
    edges = torch.cat([big[:, :32], big[:, 32 + cols:]], 1).clone()
    want = torch.softmax(v.double(), -1)
    xt.softmax(v, out=v)
    close(v, want)
    v.copy_(x)
    xt.rmsnorm(v, w, out=v)
    assert torch.equal(v, xt.rmsnorm(x, w))
    assert torch.equal(torch.cat([big[:, :32], big[:, 32 + cols:]], 1), edges)


def test_dependent_chain_on_one_stream():
    """Every kernel starts early (PDL) and must still wait for the one before it: a chain of
    ops, each reading what the previous one wrote, equals the same chain synchronised per step."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(64, 8192, generator=g).to("cuda", torch.bfloat16)
    r = torch.randn(64, 8192, generator=g).to("cuda", torch.bfloat16)
    w = torch.randn(8192, generator=g).to("cuda", torch.bfloat16) * 0.1 + 1

    def chain(sync):
        a, b = x.clone(), r.clone()
        for _ in range(20):
            a = xt.rmsnorm(a, w)
            xt.fused_add_rmsnorm(a, b, w)
            a = xt.softmax(xt.silu_and_mul(torch.cat([a, b], -1)), scale=1.0) * 8192
            a = xt.layernorm(a, w, w)
            if sync:
                torch.cuda.synchronize()
        return a, b

    want, got = chain(True), chain(False)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])


def test_pdl_off_gives_the_same_bits(tmp_path):
    """XKERNELS_DISABLE_PDL=1 launches plainly; results are bitwise those of PDL launches."""
    code = ("import torch, xkernels.torch as xt\n"
            "g = torch.Generator().manual_seed(3)\n"
            "x = torch.randn(300, 20000, generator=g).to('cuda', torch.bfloat16)\n"
            "w = torch.randn(20000, generator=g).to('cuda', torch.bfloat16)\n"
            "ys = [xt.rmsnorm(x, w), xt.softmax(x), xt.layernorm(x, w, w), xt.gelu_and_mul(x)]\n"
            "torch.save([y.cpu() for y in ys], __import__('sys').argv[1])\n")
    outs = []
    for flag in ("0", "1"):
        path = tmp_path / f"pdl_{flag}.pt"
        env = {**os.environ, "XKERNELS_DISABLE_PDL": flag}
        subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=True)
        outs.append(torch.load(path))
    for a, b in zip(*outs):
        assert torch.equal(a, b)


def test_torch_compile_fullgraph_inductor():
    def layer(x, r, w, b):
        xt.fused_add_rmsnorm(x, r, w)
        h = xt.silu_and_mul(torch.cat([x, x * 2], -1))
        h = xt.add_bias_gelu(h, b, approximate="tanh")
        return xt.softmax(xt.rmsnorm(h, w), scale=0.5) + 1, r

    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
    args = [mk(16, 256), mk(16, 256), mk(256), mk(256)]
    eager = layer(*[a.clone() for a in args])
    compiled = torch.compile(layer, fullgraph=True)(*[a.clone() for a in args])
    for e, c in zip(eager, compiled):
        assert torch.allclose(e.float(), c.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("op", sorted(ROW_OPS))
def test_opcheck_cuda(op):
    from test_torch_adapter import _op_args

    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in _op_args(op)]
    torch.library.opcheck(getattr(torch.ops.xkernels, op).default, args)


def test_device_mismatch_is_a_value_error():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(ValueError, match="weight must be on input's device cuda:0, got cpu"):
        xt.rmsnorm(x, torch.randn(8))
    with pytest.raises(ValueError, match="out must be on input's device cuda:0, got cpu"):
        xt.softmax(x, out=torch.empty(4, 8))


def test_second_device_code_path():
    """Tensors on device k run on device k (the device guard), whatever the current device."""
    k = torch.cuda.device_count() - 1
    x = torch.randn(8, 256, device=f"cuda:{k}")
    w = torch.randn(256, device=f"cuda:{k}")
    with torch.cuda.device(0):
        y = xt.rmsnorm(x, w)
    assert y.device == x.device
    assert torch.allclose(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, atol=1e-5)


def test_cpp_example(tmp_path):
    exe = tmp_path / "rmsnorm_example"
    cmd = (ROOT / "examples/cpp/BUILD").read_text().split("\n")[0].replace("$OUT", str(exe))
    subprocess.run(cmd, shell=True, check=True, cwd=ROOT)
    res = subprocess.run([str(exe)], capture_output=True, text=True, env=os.environ, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS" in res.stdout, res.stdout
