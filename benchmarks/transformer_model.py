"""The character-level transformer LM of the performance issue, twice from the same weights:
with `oc.nn` as a user writes it, and with PyTorch (explicit matmuls, same formulas).

vocab 95, d_model 64, 2 pre-LN blocks (4-head causal attention, a 64-256-64 gelu MLP),
a learned position embedding, final layer norm, a linear head; context 32, batch 16,
cross-entropy over every position, AdamW. Position-wise linears are written as the issue
writes them, `oc.einsum("...|..s..,i; i->o => ...|..s..,o", x, {w}) + {b, o := [out_dim]}`.
"""

# Written in the @op dialect: names declared inline ({w}) exist after rewriting.
# ruff: noqa: F821, F841
# mypy: ignore-errors

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import ocannl_ast as oc


@dataclass(frozen=True)
class Config:
    vocab: int = 95
    d_model: int = 64
    heads: int = 4
    blocks: int = 2
    hidden: int = 256
    context: int = 32
    batch: int = 16
    n_batches: int = 4  # the resident data set: this many batches of (batch, context)
    lr: float = 1e-3
    weight_decay: float = 0.01


QUICK = Config(vocab=11, d_model=8, heads=2, blocks=1, hidden=16, context=4, batch=2,
               n_batches=2)
#: A larger model for the informational rows (`--medium`): per-op overheads matter less
#: here and the matrix products more (about 20 GFLOP a step).
MEDIUM = Config(d_model=256, heads=8, blocks=2, hidden=1024, context=128, batch=16)


@oc.op
def pw_linear(out_dim):
    """A position-wise linear layer over the last axis, as the issue writes it."""
    return lambda x: oc.einsum("...|..s..,i; i->o => ...|..s..,o", x, {w}) + {b, o := [out_dim]}


@oc.op
def pos_embedding(context, dim):
    return lambda x: x + {pos, o := [context, dim]}


def data(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (n_batches, batch, context) and next-token targets, from a fixed text."""
    rng = np.random.default_rng(0)
    n = cfg.n_batches * cfg.batch * (cfg.context + 1)
    text = rng.integers(0, cfg.vocab, size=n)
    seqs = text.reshape(cfg.n_batches, cfg.batch, cfg.context + 1)
    return seqs[..., :-1].astype(np.float32), seqs[..., 1:].astype(np.int64)


class Params:
    """Collects the params a layer call added: `take(out, before)` names the new ones."""

    def __init__(self) -> None:
        self.by_name: dict[str, oc.Tensor] = {}

    def take(self, prefix: str, out: oc.Tensor, before: oc.Tensor | None) -> None:
        old = {t.id for t in before.params()} if before is not None else set()
        for t in out.params():
            if t.id not in old:
                key = f"{prefix}.{t.label}"
                assert key not in self.by_name, key
                self.by_name[key] = t


def ocannl_loss(cfg: Config, ids: oc.Tensor, onehot: oc.Tensor) -> tuple[oc.Tensor, Params]:
    ps = Params()
    x = oc.nn.embedding(cfg.vocab, cfg.d_model)(ids)
    ps.take("emb", x, None)
    y = pos_embedding(cfg.context, cfg.d_model)(x)
    ps.take("pos", y, x)
    x = y
    hd = cfg.d_model // cfg.heads
    for i in range(cfg.blocks):
        h = oc.nn.layer_norm()(x)
        ps.take(f"b{i}.ln1", h, x)
        a = oc.nn.multi_head_attention(cfg.heads, hd, causal=True)(h)
        ps.take(f"b{i}.attn", a, h)
        x2 = x + a
        h = oc.nn.layer_norm()(x2)
        ps.take(f"b{i}.ln2", h, x2)
        u = pw_linear(cfg.hidden)(h)
        ps.take(f"b{i}.fc1", u, h)
        g = oc.nn.gelu(u)
        m = pw_linear(cfg.d_model)(g)
        ps.take(f"b{i}.fc2", m, g)
        x = x2 + m
    h = oc.nn.layer_norm()(x)
    ps.take("lnf", h, x)
    logits = pw_linear(cfg.vocab)(h)
    ps.take("head", logits, h)
    return oc.nn.cross_entropy(logits, onehot), ps


def init_weights(cfg: Config, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """PyTorch-like initial values for every param, by name (ocannl's layout)."""
    rng = np.random.default_rng(1)
    out = {}
    for name, shape in sorted(shapes.items()):
        leaf = name.rsplit(".", 1)[1]
        if leaf == "ln_gain":
            v = np.ones(shape)
        elif leaf in ("ln_bias", "b"):
            v = rng.uniform(-0.05, 0.05, shape) if leaf == "b" else np.zeros(shape)
        elif leaf in ("emb_table", "pos"):
            v = rng.normal(0, 0.5, shape)
        else:  # weights: uniform +-1/sqrt(fan_in)
            fan_in = shape[-1] if leaf in ("w", "wq", "wk", "wv") else shape[1] * shape[2]
            v = rng.uniform(-1, 1, shape) / math.sqrt(fan_in)
        out[name] = v.astype(np.float32)
    return out


Step = Callable[[int], float | None]


def build_ocannl(cfg: Config, ids_np: np.ndarray, tgt_np: np.ndarray, ctx: oc.Context,
                 weights: dict[str, np.ndarray] | None = None
                 ) -> tuple[oc.Routine, oc.Tensor, dict[str, np.ndarray]]:
    """The compiled step (forward, backprop, AdamW) on batch `i` of the data set, its loss
    tensor, and the weights set into `ctx` (`weights`, or fresh ones)."""
    onehot_np = np.eye(cfg.vocab, dtype=np.float32)[tgt_np]
    ids_all = oc.ndarray(ids_np, batch_axes=2)
    tgt_all = oc.ndarray(onehot_np, batch_axes=2)
    bi = oc.static_index("batch")
    loss, ps = ocannl_loss(cfg, ids_all.batch_slice(bi), tgt_all.batch_slice(bi))
    assert len(ps.by_name) == len(loss.params()), "every param named"
    step = ctx.compile([oc.grad_update(loss),
                        oc.adam_update(loss, learning_rate=cfg.lr, weight_decay=cfg.weight_decay)])
    if weights is None:
        weights = init_weights(cfg, {k: t.dims() for k, t in ps.by_name.items()})
    for k, t in ps.by_name.items():
        ctx.set(t, weights[k])
    return step, loss, weights


def torch_step(cfg: Config, ids_np: np.ndarray, tgt_np: np.ndarray,
               weights: dict[str, np.ndarray], device: str = "cpu") -> Step:
    """The same model and AdamW in PyTorch eager (explicit matmuls on ocannl's layouts), on
    `device` ("cuda": every tensor there)."""
    import torch
    import torch.nn.functional as F

    p = {k: torch.nn.Parameter(torch.from_numpy(v.copy()).to(device))
         for k, v in weights.items()}
    opt = torch.optim.AdamW(p.values(), lr=cfg.lr, weight_decay=cfg.weight_decay, eps=1e-8)
    ids_t = torch.from_numpy(ids_np.astype(np.int64)).to(device)
    tgt_t = torch.from_numpy(tgt_np).to(device)
    hd = cfg.d_model // cfg.heads
    mask = torch.ones(cfg.context, cfg.context, dtype=torch.bool, device=device).tril()

    def ln(x: torch.Tensor, pre: str) -> torch.Tensor:
        return F.layer_norm(x, (cfg.d_model,), p[f"{pre}.ln_gain"], p[f"{pre}.ln_bias"], 1e-5)

    def lin(x: torch.Tensor, pre: str) -> torch.Tensor:
        return x @ p[f"{pre}.w"].T + p[f"{pre}.b"]

    def attn(x: torch.Tensor, pre: str) -> torch.Tensor:
        s = x.shape[1]
        q, k, v = (torch.einsum("bsf,hdf->bhsd", x, p[f"{pre}.{n}"]) for n in ("wq", "wk", "wv"))
        sc = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        wts = torch.softmax(sc.masked_fill(~mask[:s, :s], -1e9), dim=-1)
        return torch.einsum("bhsd,fhd->bsf", wts @ v, p[f"{pre}.wo"])

    def loss_of(i: int) -> torch.Tensor:
        ids, tgt = ids_t[i % cfg.n_batches], tgt_t[i % cfg.n_batches]
        x = p["emb.emb_table"].T[ids] + p["pos.pos"]
        for j in range(cfg.blocks):
            x = x + attn(ln(x, f"b{j}.ln1"), f"b{j}.attn")
            x = x + lin(F.gelu(lin(ln(x, f"b{j}.ln2"), f"b{j}.fc1"), approximate="tanh"),
                        f"b{j}.fc2")
        logits = lin(ln(x, "lnf"), "head")
        return F.cross_entropy(logits.reshape(-1, cfg.vocab), tgt.reshape(-1))

    def step(i: int) -> float:
        opt.zero_grad(set_to_none=False)
        loss = loss_of(i)
        loss.backward()
        opt.step()
        return float(loss.detach())

    step.loss_of = loss_of  # type: ignore[attr-defined]
    step.params = p  # type: ignore[attr-defined]
    return step


def flops_per_step(cfg: Config) -> float:
    """Multiply-adds x 2 of the model's products, forward + backward (x3)."""
    t = cfg.batch * cfg.context
    d, h = cfg.d_model, cfg.hidden
    per_block = t * (4 * d * d + 2 * d * h) + 2 * cfg.batch * cfg.context * cfg.context * d
    fwd = cfg.blocks * per_block + t * d * cfg.vocab + t * cfg.vocab * d  # head + embedding
    return 2.0 * 3.0 * fwd
