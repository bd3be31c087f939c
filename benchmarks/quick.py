"""A fast first look at xkernels' bandwidth on the big shapes (triton.testing.do_bench, L2 flushed);
the side-by-side numbers come from `xkernels bench`."""

import torch
import triton

import xkernels.torch as xt

bf = torch.bfloat16


def gbps(fn, nbytes):
    ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    return ms, nbytes / ms / 1e6


def main():
    rows = []
    for r, c in [(8192, 4096), (32768, 8192), (1048576, 128)]:
        x, w = torch.randn(r, c, device="cuda", dtype=bf), torch.randn(c, device="cuda", dtype=bf)
        o = torch.empty_like(x)
        rows.append((f"rmsnorm {r}x{c}", *gbps(lambda: xt.rmsnorm(x, w, out=o), 2 * r * c * 2)))
        res = torch.randn_like(x)
        rows.append((f"fused_add_rmsnorm {r}x{c}", *gbps(lambda: xt.fused_add_rmsnorm(x, res, w), 4 * r * c * 2)))
        b = torch.randn(c, device="cuda", dtype=bf)
        rows.append((f"layernorm {r}x{c}", *gbps(lambda: xt.layernorm(x, w, b, out=o), 2 * r * c * 2)))
        del x, o, res
    for r in [4096, 8192]:
        x = torch.randn(r, 2 * 14336, device="cuda", dtype=bf)
        o = torch.empty(r, 14336, device="cuda", dtype=bf)
        rows.append((f"silu_and_mul {r}x2x14336", *gbps(lambda: xt.silu_and_mul(x, out=o), 3 * r * 14336 * 2)))
    for r, c in [(32768, 8192), (4096, 131072)]:
        x = torch.randn(r, c, device="cuda", dtype=bf)
        o = torch.empty_like(x)
        rows.append((f"softmax {r}x{c}", *gbps(lambda: xt.softmax(x, out=o), 2 * r * c * 2)))
        del x, o
    x = torch.randn(131072, 4096, device="cuda", dtype=bf)
    b = torch.randn(4096, device="cuda", dtype=bf)
    o = torch.empty_like(x)
    rows.append(("add_bias_gelu 131072x4096", *gbps(lambda: xt.add_bias_gelu(x, b, out=o), 2 * x.numel() * 2)))
    del x, o
    n = 1 << 28
    a, b2, c2 = (torch.randn(n, device="cuda", dtype=bf) for _ in range(3))
    o = torch.empty_like(a)
    rows.append(("mul_add 2^28", *gbps(lambda: xt.mul_add(a, b2, c2, out=o), 4 * n * 2)))
    rows.append(("torch.addcmul 2^28", *gbps(lambda: torch.addcmul(c2, a, b2, out=o), 4 * n * 2)))
    src = torch.empty(1 << 29, device="cuda", dtype=bf)
    dst = torch.empty_like(src)
    rows.append(("copy 1GiB", *gbps(lambda: dst.copy_(src), 2 * src.numel() * 2)))
    print(f"{'case':32s} {'ms':>9s} {'GB/s':>8s}")
    for name, ms, g in rows:
        print(f"{name:32s} {ms:9.4f} {g:8.1f}")


if __name__ == "__main__":
    main()
