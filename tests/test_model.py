"""A whole model on xkernels: xkernels.torch.nn's layers, patch() of a Hugging Face Llama and
Qwen3, the paged KV cache, the JAX layer, fallbacks.

Tolerance of a patched model's logits. Both the patched model and HF's own run in bf16, and each
rounds its intermediates (projections, norms, attention output) to bf16 in a different order, so
neither matches the other to the bit. Their common yardstick is the same model in float32 (the
same weights, upcast): e(x) = ||logits_x - logits_fp32|| / ||logits_fp32||. The patched model must
be no less accurate than HF's bf16 model up to a margin: e(xkernels) <= 1.5 e(hf bf16) + 2e-3
(observed: the two errors are within 20% of each other). A wrong kernel (a missing RoPE, a wrong
mask, a stale cache page) gives errors of order 1, far above that.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch
from conftest import gpu, needs_jax
from xkernels import fallback

transformers = pytest.importorskip("transformers")
xnn = pytest.importorskip("xkernels.torch.nn")

HOST = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000,
        "max_position_embeddings": 4096}
# the proof: 4 layers, hidden 2048, GQA 16 / 4
DEVICE = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 4,
          "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 128,
          "vocab_size": 32000, "max_position_embeddings": 8192}
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def _model(kind: str, dims: dict, device: str, seed: int = 0):
    """A random-weight HF model (fp32), no download."""
    torch.manual_seed(seed)
    if kind == "llama":
        cfg = transformers.LlamaConfig(**dims, rope_parameters=LLAMA3_ROPE)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.Qwen3Config(**dims)
        cls = transformers.Qwen3ForCausalLM
    with torch.device(device):
        m = cls(cfg).eval()
    with torch.no_grad():  # norms away from 1, so that a norm weight that is dropped shows
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return m


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _hf_cache(model) -> dict:
    """A fresh HF DynamicCache under the keyword the model's forward takes (cache_kwarg)."""
    return {xnn.cache_kwarg(model): transformers.DynamicCache(config=model.config)}


def _hf_run(model, ids: torch.Tensor, steps: torch.Tensor) -> list[torch.Tensor]:
    """Logits of a prefill of ids, then one step per column of steps (HF's DynamicCache)."""
    kw = _hf_cache(model)
    outs = [model(ids, **kw, use_cache=True).logits[:, -1]]
    for i in range(steps.shape[1]):
        outs.append(model(steps[:, i: i + 1], **kw, use_cache=True).logits[:, -1])
    return outs


def _xk_run(model, ids, steps, page_size: int) -> list[torch.Tensor]:
    cfg = model.config
    cache = xnn.PagedKVCache(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim,
                             batch_size=ids.shape[0], max_seq_len=ids.shape[1] + steps.shape[1],
                             page_size=page_size, dtype=torch.bfloat16, device=ids.device)
    kw = {xnn.cache_kwarg(model): cache}  # (cache= or past_key_values=, by transformers version)
    outs = [model(ids, **kw).logits[:, -1]]
    for i in range(steps.shape[1]):
        outs.append(model(steps[:, i: i + 1], **kw).logits[:, -1])
    return outs


def _check_patched(kind: str, dims: dict, device: str, batch: int, prompt: int, n_steps: int,
                   page_size: int) -> None:
    model = _model(kind, dims, device)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, dims["vocab_size"], (batch, prompt), generator=gen).to(device)
    steps = torch.randint(0, dims["vocab_size"], (batch, n_steps), generator=gen).to(device)
    with torch.inference_mode():
        ref = _hf_run(model, ids, steps)  # float32
        model.to(torch.bfloat16)
        hf = _hf_run(model, ids, steps)
        xnn.patch(model, strict=True)
        xk = _xk_run(model, ids, steps, page_size)
        # the patched model with HF's own cache (generate's path) agrees too
        xk_hf_cache = _hf_run(model, ids, steps[:, :2])
    for i, (r, h, x) in enumerate(zip(ref, hf, xk)):
        e_hf, e_xk = _rel(h, r), _rel(x, r)
        assert e_xk <= 1.5 * e_hf + 2e-3, (
            f"{kind} {'prefill' if i == 0 else f'decode step {i}'}: xkernels' logits are off "
            f"the float32 model's by {e_xk:.4f}, HF bf16's by {e_hf:.4f}")
    for i, (x, y) in enumerate(zip(xk, xk_hf_cache)):
        assert _rel(y, ref[i]) <= 1.5 * _rel(hf[i], ref[i]) + 2e-3


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_patched_model_matches_hf_host(kind):
    """The host path: a small model, prefill of 2 x 40 tokens, 3 decode steps, odd page size."""
    _check_patched(kind, HOST, "cpu", batch=2, prompt=40, n_steps=3, page_size=7)


@gpu
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_patched_model_matches_hf_gpu(kind):
    """The issue's proof on the GPU: 4 layers, hidden 2048, GQA 16/4, a prefill of 512 tokens and
    32 decode steps over a paged KV cache (page 16)."""
    _check_patched(kind, DEVICE, "cuda", batch=2, prompt=512, n_steps=32, page_size=16)


def _padded_run(model, ids, mask, steps) -> list[torch.Tensor]:
    """Logits at each request's last token: a prefill of left-padded ids (mask: 1 real, 0
    padding), then decode steps, positions counted over the real tokens (as generate does)."""
    kw = _hf_cache(model)

    def pos(m):
        return (m.long().cumsum(1) - 1).clamp(min=0)

    p = pos(mask)
    outs = [model(ids, attention_mask=mask, position_ids=p, **kw,
                  use_cache=True).logits[:, -1]]
    for i in range(steps.shape[1]):
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], 1)
        outs.append(model(steps[:, i: i + 1], attention_mask=mask,
                          position_ids=pos(mask)[:, -1:], **kw,
                          use_cache=True).logits[:, -1])
    return outs


def _check_padded(kind: str, dims: dict, device: str, prompt: int, pads: list[int],
                  n_steps: int) -> None:
    """A padded batch through HF's cache: request b has pads[b] padding tokens on the left."""
    model = _model(kind, dims, device)
    gen = torch.Generator().manual_seed(2)
    batch = len(pads)
    ids = torch.randint(0, dims["vocab_size"], (batch, prompt), generator=gen).to(device)
    steps = torch.randint(0, dims["vocab_size"], (batch, n_steps), generator=gen).to(device)
    mask = torch.ones(batch, prompt, dtype=torch.long, device=device)
    for b, n in enumerate(pads):
        mask[b, :n] = 0
        ids[b, :n] = 0
    with torch.inference_mode():
        ref = _padded_run(model, ids, mask, steps)  # float32
        model.to(torch.bfloat16)
        hf = _padded_run(model, ids, mask, steps)
        xnn.patch(model, strict=True)
        xk = _padded_run(model, ids, mask, steps)
    for i, (r, h, x) in enumerate(zip(ref, hf, xk)):
        e_hf, e_xk = _rel(h, r), _rel(x, r)
        assert e_xk <= 1.5 * e_hf + 2e-3, (
            f"{kind} padded {'prefill' if i == 0 else f'decode step {i}'}: xkernels' logits "
            f"are off the float32 model's by {e_xk:.4f}, HF bf16's by {e_hf:.4f}")


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_patched_model_padded_batch_host(kind):
    """Left padding (generate's layout) of 0, 5 and 39 of 40 tokens: the padding must not be
    attended to. Before the "xkernels" mask function HF gave the layers no mask at all, and a
    padded batch came out silently wrong."""
    _check_padded(kind, HOST, "cpu", prompt=40, pads=[0, 5, 39], n_steps=3)


@gpu
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_patched_model_padded_batch_gpu(kind):
    _check_padded(kind, DEVICE, "cuda", prompt=300, pads=[0, 17, 250], n_steps=4)


def test_padded_attention_matches_masked_sdpa():
    """padded_attention (the kernels over the gathered real tokens) against the masked float
    composite, right and left padding, GQA, a soft cap and a window; padded query rows 0."""
    torch.manual_seed(3)
    b, s, length, hq, hk, d = 3, 9, 20, 4, 2, 64
    q = torch.randn(b, s, hq, d, dtype=torch.bfloat16)
    k = torch.randn(b, length, hk, d, dtype=torch.bfloat16)
    v = torch.randn(b, length, hk, d, dtype=torch.bfloat16)
    mask = torch.ones(b, length, dtype=torch.bool)
    mask[1, :6] = False   # left padding
    mask[2, -3:] = False  # right padding: its last 3 queries are padding
    for kw in ({}, {"logits_soft_cap": 5.0, "window_left": 4}):
        got = xnn.padded_attention(q, k, v, mask, sm_scale=d ** -0.5, **kw)
        want = xnn._sdpa(q, k, v, d ** -0.5, kw.get("window_left", -1),
                         kw.get("logits_soft_cap", 0.0), mask)
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)
        assert got[2, -3:].abs().max() == 0  # padded queries


def test_patch_keeps_weights():
    model = _model("qwen3", HOST, "cpu")
    layer = model.model.layers[1]
    q, gate, qn = (layer.self_attn.q_proj.weight.clone(), layer.mlp.gate_proj.weight.clone(),
                   layer.self_attn.q_norm.weight.clone())
    xnn.patch(model)
    new = model.model.layers[1].layer
    d = HOST["num_attention_heads"] * HOST["head_dim"]
    assert torch.equal(new.self_attn.qkv[:d], q)
    assert torch.equal(new.mlp.gate_up[: HOST["intermediate_size"]], gate)
    assert torch.equal(new.self_attn.q_norm, qn)
    assert isinstance(model.model.norm, xnn.RMSNorm)


def test_cache_keyword():
    """cache_kwarg names the keyword a forward takes its cache by; a PagedKVCache that reached the
    patched layers as `cache=` while HF's model made a cache of its own (a transformers whose
    forward takes past_key_values=, which passes `cache=` on unread) is refused, not run with the
    positions of that empty cache."""

    def new_forward(input_ids=None, cache=None, **kwargs):
        return None

    def old_forward(input_ids=None, past_key_values=None, **kwargs):
        return None

    assert xnn.cache_kwarg(new_forward) == "cache"
    assert xnn.cache_kwarg(old_forward) == "past_key_values"
    model = _model("llama", HOST, "cpu")
    model.to(torch.bfloat16)
    xnn.patch(model, strict=True)
    paged = xnn.PagedKVCache(HOST["num_hidden_layers"], HOST["num_key_value_heads"],
                             HOST["head_dim"], batch_size=1, max_seq_len=8)
    x = torch.randn(1, 3, HOST["hidden_size"], dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="past_key_values"):
        model.model.layers[0](x, cache=paged,
                              past_key_values=transformers.DynamicCache(config=model.config))
    # either keyword reaches the same cache: a prefill of 3 tokens, then a step, through layer 0
    # (positions from the cache's length), the same bits both ways
    outs = {}
    for kw in ("cache", "past_key_values"):
        c = xnn.PagedKVCache(HOST["num_hidden_layers"], HOST["num_key_value_heads"],
                             HOST["head_dim"], batch_size=1, max_seq_len=8)
        with torch.inference_mode():
            model.model.layers[0](x, **{kw: c})
            outs[kw] = model.model.layers[0](x[:, :1], **{kw: c})
    assert torch.equal(outs["cache"], outs["past_key_values"])


def test_paged_cache_table():
    """begin() gives FlashInfer's table: pages per request, the last page's fill, the slots."""
    c = xnn.PagedKVCache(1, 2, 64, batch_size=3, max_seq_len=40, page_size=16)
    c.begin(17)
    m = c.begin(16)  # 33 tokens each: 3 pages, the last holding 1
    assert m["kv_indptr"].tolist() == [0, 3, 6, 9]
    assert m["kv_last_page_len"].tolist() == [1, 1, 1]
    assert m["qo_indptr"].tolist() == [0, 16, 32, 48]
    idx = m["kv_indices"].tolist()
    assert idx[:3] == c.page_table[0, :3].tolist() and idx[6:] == c.page_table[2, :3].tolist()
    pos = 17 + np.arange(16)
    want = c.page_table[1, pos // 16] * 16 + pos % 16
    assert m["slots"][16:32].tolist() == want.tolist()
    assert sorted(c.page_table.reshape(-1).tolist()) == list(range(9))
    with pytest.raises(ValueError, match="max_seq_len"):
        c.begin(8)


def test_rope_inv_freq_matches_hf():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = transformers.LlamaConfig(**HOST, rope_parameters=LLAMA3_ROPE)
    want, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    got = xnn.rope_inv_freq(xnn.RopeConfig.from_hf(cfg, HOST["head_dim"]))
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=0)


def _layer(head_dim: int, dtype=torch.bfloat16, strict=None, seed=0, qk_norm=False):
    torch.manual_seed(seed)
    layer = xnn.DecoderLayer(256, 512, 4, 2, head_dim, dtype=dtype, strict=strict,
                             qk_norm=qk_norm)
    with torch.no_grad():
        for p in layer.parameters():
            if p.dim() == 2:
                p.normal_(0, p.shape[1] ** -0.5)
            else:
                p.uniform_(0.5, 1.5)
    return layer


def test_fallback_warns_once_and_strict_raises(monkeypatch):
    """head_dim 32 has no attention kernel: SDPA runs instead, with one warning naming it; the
    result matches the same layer's float32 composite; strict mode refuses."""
    fallback.reset()
    layer = _layer(32)
    x = torch.randn(2, 9, 256, dtype=torch.bfloat16)
    pos = torch.arange(9)[None]
    with torch.inference_mode(), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y1 = layer(x, pos)
        y2 = layer(x, pos)
    msgs = [str(m.message) for m in w if issubclass(m.category, fallback.FallbackWarning)]
    assert len(msgs) == 1 and "head_dim" in msgs[0] and "32" in msgs[0], msgs
    assert torch.equal(y1, y2)
    assert fallback.counts[next(iter(fallback.counts))] == 2
    with pytest.raises(fallback.UnsupportedError, match="head_dim"), torch.inference_mode():
        _layer(32, strict=True)(x, pos)
    monkeypatch.setenv(fallback.STRICT_ENV, "1")
    with pytest.raises(fallback.UnsupportedError, match="head_dim"), torch.inference_mode():
        _layer(32)(x, pos)


def test_fallback_float32_layer_matches_bf16_kernels():
    """A float32 layer: the GEMMs and attention fall back (16-bit kernels), the norms and
    activations do not; its output is the bf16 layer's within bf16 rounding."""
    fallback.reset()
    lay16 = _layer(64)
    lay32 = copy.deepcopy(lay16).float()
    x = torch.randn(1, 17, 256)
    pos = torch.arange(17)[None]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", fallback.FallbackWarning)
        y32 = lay32(x, pos)
        y16 = lay16(x.bfloat16(), pos)
    sites = {s for s, _ in fallback.counts}
    assert {"Attention.qkv", "Attention.attention", "Attention.o", "GatedMLP.gate_up",
            "GatedMLP.down"} <= sites, sites
    assert not any("rmsnorm" in s or "and_mul" in s for s in sites), sites
    assert _rel(y16, y32) < 2e-2


def _jax_params(layer):
    import jax.numpy as jnp

    return {k: jnp.asarray(v.float().cpu().numpy()).astype(jnp.bfloat16)
            for k, v in layer.export_params().items()}


def _jax_layer_vs_torch(device: str, qk_norm: bool):
    import jax
    import jax.numpy as jnp
    import xkernels.jax.nn as jnn

    layer = _layer(64, qk_norm=qk_norm).to(device)
    x = torch.randn(2, 33, 256, dtype=torch.bfloat16, device=device)
    pos = (torch.arange(33, device=device) + 5)[None].expand(2, 33)
    with torch.inference_mode():
        want = layer(x, pos).float().cpu().numpy()
    cfg = jnn.LayerConfig(**layer.export_config())
    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    params = jax.device_put(_jax_params(layer), dev)
    xj = jax.device_put(jnp.asarray(x.float().cpu().numpy()).astype(jnp.bfloat16), dev)
    pj = jax.device_put(jnp.asarray(pos.cpu().numpy(), jnp.int32), dev)
    got = np.asarray(jax.jit(jnn.decoder_layer, static_argnames="cfg")(params, xj, pj, cfg=cfg)
                     .astype(jnp.float32))
    # the same kernels in the same order: equal but for a bf16 rounding step where XLA's own add
    # (the last residual) and torch's differ in fusion
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    assert _rel(torch.from_numpy(got.copy()), torch.from_numpy(want)) < 2e-3


@needs_jax
@pytest.mark.parametrize("qk_norm", [False, True])
def test_jax_layer_matches_torch_layer_host(qk_norm):
    _jax_layer_vs_torch("cpu", qk_norm)


@gpu
@needs_jax
@pytest.mark.parametrize("qk_norm", [False, True])
def test_jax_layer_matches_torch_layer_gpu(qk_norm):
    from conftest import HAS_JAX_GPU

    if not HAS_JAX_GPU:
        pytest.fail("JAX has no GPU backend on a machine with a GPU")
    _jax_layer_vs_torch("cuda", qk_norm)


def _jax_paged_vs_torch(device: str):
    import jax
    import jax.numpy as jnp
    import xkernels.jax.nn as jnn

    dev = jax.devices("gpu" if device == "cuda" else "cpu")[0]

    def put(a, dtype=None):
        a = jnp.asarray(a.float().cpu().numpy() if dtype is None else a.cpu().numpy(), dtype)
        return jax.device_put(a.astype(jnp.bfloat16) if dtype is None else a, dev)

    layer = _layer(64).to(device)
    cache = xnn.PagedKVCache(1, 2, 64, batch_size=2, max_seq_len=40, page_size=16,
                             auto_step=False, device=device)
    x0 = torch.randn(2, 21, 256, dtype=torch.bfloat16, device=device)
    x1 = torch.randn(2, 1, 256, dtype=torch.bfloat16, device=device)
    cfg = jnn.LayerConfig(**layer.export_config())
    params = jax.device_put(_jax_params(layer), dev)
    kc = jax.device_put(jnp.zeros(tuple(cache.k[0].shape), jnp.bfloat16), dev)
    vc = jnp.zeros_like(kc)
    f = jax.jit(jnn.decoder_layer_paged, static_argnames="cfg")
    for x, start in ((x0, 0), (x1, 21)):
        pos = (torch.arange(x.shape[1], device=device) + start)[None].expand(2, -1)
        with torch.inference_mode():
            m = cache.begin(x.shape[1])
            want = layer(x, pos, cache).float().cpu().numpy()
        j = {k: put(m[k], m[k].cpu().numpy().dtype) for k in ("slots", "kv_indptr", "kv_indices", "kv_last_page_len", "qo_indptr")}
        got, kc, vc = f(params, put(x), put(pos, jnp.int32), kc, vc, j["slots"],
                        j["kv_indptr"], j["kv_indices"], j["kv_last_page_len"], j["qo_indptr"],
                        cfg=cfg)
        np.testing.assert_allclose(np.asarray(got.astype(jnp.float32)), want, rtol=1e-2,
                                   atol=1e-2)


@needs_jax
def test_jax_paged_layer_matches_torch_host():
    """decoder_layer_paged: a prefill then a decode step over a paged cache, as the torch layer
    with PagedKVCache gives (host path)."""
    _jax_paged_vs_torch("cpu")


@gpu
@needs_jax
def test_jax_paged_layer_matches_torch_gpu():
    from conftest import HAS_JAX_GPU

    if not HAS_JAX_GPU:
        pytest.fail("JAX has no GPU backend on a machine with a GPU")
    _jax_paged_vs_torch("cuda")


@gpu
def test_decode_step_in_cuda_graph():
    """A decode step of a layer over the paged cache, captured in a CUDA graph and replayed,
    gives the eager step's output (no host sync, no allocation outside the graph's pool)."""
    torch.manual_seed(0)
    layer = xnn.DecoderLayer(1024, 2048, 8, 2, 128, dtype=torch.bfloat16, device="cuda",
                             strict=True)
    cache = xnn.PagedKVCache(1, 2, 128, batch_size=4, max_seq_len=300, page_size=16,
                             dtype=torch.bfloat16, device="cuda", auto_step=False)
    with torch.inference_mode():
        cache.begin(257)
        cache.append(0, torch.randn(4, 257, 2, 128, device="cuda", dtype=torch.bfloat16),
                     torch.randn(4, 257, 2, 128, device="cuda", dtype=torch.bfloat16))
        cache.begin(1)
        x = torch.randn(4, 1, 1024, device="cuda", dtype=torch.bfloat16)
        pos = torch.full((4, 1), 257, device="cuda")
        want = layer(x, pos, cache).clone()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            layer(x, pos, cache)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            y = layer(x, pos, cache)
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
    assert torch.equal(y, want)
