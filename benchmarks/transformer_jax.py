"""The transformer LM of transformer_model.py in JAX: the same formulas on ocannl's weight
layouts, and AdamW written out as `torch.optim.AdamW` computes it (decoupled weight decay,
bias-corrected moments, eps added to the corrected root), the whole step (forward, backward
and update) one `jax.jit` function whose parameter and moment buffers are donated (updated
in place, as a compiled training step does).

One thread: XLA's CPU client is told so before jax is first imported (`use_one_thread`:
Eigen's intra-op pool off, one intra-op thread); where jax was imported before that, the
flags cannot change and the caller says so.
"""

# mypy: ignore-errors

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable

import numpy as np
import transformer_model as tm

ONE_THREAD_FLAGS = ("--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1")


def use_one_thread() -> bool:
    """Set XLA's flags for one CPU thread; False when jax is already imported (too late)."""
    if "jax" in sys.modules:
        return False
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, *(f for f in ONE_THREAD_FLAGS if f not in flags)])
    return True


def jax_step(cfg: tm.Config, ids_np: np.ndarray, tgt_np: np.ndarray,
             weights: dict[str, np.ndarray]) -> Callable[[int], float]:
    """`step(i)`: one AdamW step on batch ``i % n_batches``, returning its loss (the step
    done: XLA dispatches asynchronously, and the loss waits for it)."""
    import jax
    import jax.numpy as jnp

    hd = cfg.d_model // cfg.heads
    mask = jnp.tril(jnp.ones((cfg.context, cfg.context), dtype=bool))
    ids_all = jnp.asarray(ids_np.astype(np.int32))
    tgt_all = jnp.asarray(tgt_np.astype(np.int32))
    b1, b2, eps = 0.9, 0.999, 1e-8

    def ln(p, x, pre):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * p[f"{pre}.ln_gain"] + p[f"{pre}.ln_bias"]

    def lin(p, x, pre):
        return x @ p[f"{pre}.w"].T + p[f"{pre}.b"]

    def attn(p, x, pre):
        q, k, v = (jnp.einsum("bsf,hdf->bhsd", x, p[f"{pre}.{n}"]) for n in ("wq", "wk", "wv"))
        sc = (q @ jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(hd))
        wts = jax.nn.softmax(jnp.where(mask, sc, -1e9), axis=-1)
        return jnp.einsum("bhsd,fhd->bsf", wts @ v, p[f"{pre}.wo"])

    def loss_of(p, ids, tgt):
        x = p["emb.emb_table"].T[ids] + p["pos.pos"]
        for j in range(cfg.blocks):
            x = x + attn(p, ln(p, x, f"b{j}.ln1"), f"b{j}.attn")
            x = x + lin(p, jax.nn.gelu(lin(p, ln(p, x, f"b{j}.ln2"), f"b{j}.fc1"),
                                       approximate=True), f"b{j}.fc2")
        logits = lin(p, ln(p, x, "lnf"), "head").reshape(-1, cfg.vocab)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, tgt.reshape(-1, 1), axis=-1).mean()

    def update(p, m, v, t, i):
        loss, g = jax.value_and_grad(loss_of)(p, ids_all[i], tgt_all[i])
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            decayed = p[k] * (1 - cfg.lr * cfg.weight_decay)
            new_m[k] = b1 * m[k] + (1 - b1) * g[k]
            new_v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k]
            denom = jnp.sqrt(new_v[k]) / jnp.sqrt(c2) + eps
            new_p[k] = decayed - (cfg.lr / c1) * new_m[k] / denom
        return loss, new_p, new_m, new_v

    fn = jax.jit(update, donate_argnums=(0, 1, 2))
    state = {"p": {k: jnp.asarray(w) for k, w in weights.items()}}
    state["m"] = {k: jnp.zeros_like(w) for k, w in state["p"].items()}
    state["v"] = {k: jnp.zeros_like(w) for k, w in state["p"].items()}
    state["t"] = 0

    def step(i: int) -> float:
        state["t"] += 1
        loss, state["p"], state["m"], state["v"] = fn(
            state["p"], state["m"], state["v"], np.float32(state["t"]),
            np.int32(i % cfg.n_batches))
        return float(loss)  # waits for the step, as the PyTorch step's float(loss) does

    return step
