"""A character-level transformer language model, trained on Python's own standard library.

The text is a few modules' source read from the running interpreter's stdlib (no download):
the first 90% of the characters train, the last 10% are held out. The model is a small GPT:
a token embedding and a learned positional embedding, pre-LayerNorm blocks of causal
multi-head attention and a gelu MLP (each with a residual connection), a final LayerNorm and
a linear head over the vocabulary; AdamW with a warmup + cosine learning-rate schedule.

The training data stays resident in the context; one compiled routine (forward, backprop,
AdamW) takes the batch index it is called with. Every --eval-every steps it prints the
held-out loss; every --save-every steps it saves a checkpoint (model, optimizer state, step
counters and the data order), and `--resume` continues from it. At the end it samples a few
lines from the model and prints a final line `held-out loss: <value>`.

    python examples/char_lm.py                  # about 25 s on 2 cores
    python examples/char_lm.py --steps 3000 --resume
"""

from __future__ import annotations

import argparse
import json
import math
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is a dependency; keep the example runnable
    def tqdm(it, **_):  # type: ignore[no-redef]
        return it

log = getattr(tqdm, "write", print)

import ocannl_ast as oc

SOURCES = ("textwrap.py", "argparse.py", "dataclasses.py", "functools.py", "inspect.py")
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))   # newline and printable ASCII: 96


# ---- data ----------------------------------------------------------------------------------

def load_text(max_chars: int) -> str:
    """A few stdlib modules' source, tabs expanded, characters outside CHARS dropped."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in SOURCES:
        path = lib / name
        if path.exists():
            parts.append(path.read_text(encoding="utf-8", errors="replace").expandtabs(4))
    text = "".join(ch for ch in "\n".join(parts) if ch in CHARS)
    if len(text) < 10_000:
        raise SystemExit(f"char_lm: found only {len(text)} characters of stdlib source in {lib}")
    return text[:max_chars]


def encode(text: str) -> np.ndarray:
    index = {ch: i for i, ch in enumerate(CHARS)}
    return np.array([index[ch] for ch in text], dtype=np.float32)


def decode(ids) -> str:
    return "".join(CHARS[int(i)] for i in ids)


def windows(data: np.ndarray, starts: np.ndarray, context: int) -> tuple[np.ndarray, ...]:
    """Input ids and next-character ids for windows beginning at `starts`."""
    idx = starts[:, None] + np.arange(context)[None, :]
    return data[idx], data[idx + 1]


# ---- model ---------------------------------------------------------------------------------

def make_model(vocab: int, context: int, d_model: int, heads: int,
               blocks: int) -> Callable[[oc.Tensor], oc.Tensor]:
    """ids `batch|seq` -> logits `batch|seq,vocab`. Every layer is made once and shared by
    every call, so the training and the sampling graph use the same parameters."""
    embed = oc.nn.embedding(vocab, d_model)
    positions = oc.nn.positional_embedding(context)
    layers = []
    for _ in range(blocks):
        layers.append((oc.nn.layer_norm(),
                       oc.nn.multi_head_attention(heads, d_model // heads, causal=True),
                       oc.nn.layer_norm(),
                       oc.nn.mlp([4 * d_model, d_model], activation=oc.nn.gelu)))
    final_norm = oc.nn.layer_norm()
    head = oc.nn.linear(vocab)

    def model(ids: oc.Tensor) -> oc.Tensor:
        h = positions(embed(ids))
        for norm1, attention, norm2, mlp in layers:
            h = h + attention(norm1(h))
            h = h + mlp(norm2(h))
        return head(final_norm(h))

    return model


# ---- training ------------------------------------------------------------------------------

def n_params(loss: oc.Tensor) -> int:
    return sum(math.prod(p.shape.batch + p.shape.output + p.shape.input)
               for p in loss.params())


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3, help="peak AdamW learning rate")
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--chars", type=int, default=400_000, help="characters of text to use")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--save-every", type=int, default=500)
    ap.add_argument("--checkpoint", default="char_lm.safetensors")
    ap.add_argument("--resume", action="store_true",
                    help="continue from --checkpoint (and its .json data state) if present")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step, as an interruption would (then try --resume)")
    ap.add_argument("--samples", type=int, default=3, help="lines to sample at the end")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="c", choices=["c", "cuda"])
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    oc.set_seed(args.seed)
    data = encode(load_text(args.chars))
    split = int(0.9 * len(data))
    train, held = data[:split], data[split:]
    vocab = len(CHARS)

    # Resident data: a block of batches the routine indexes with its static `batch` argument,
    # refilled with fresh random windows whenever it is used up.
    block = 100
    xs = oc.ndarray(np.zeros((block, args.batch, args.context), np.float32), batch_axes=2,
                    label="lm_ids")
    ys = oc.ndarray(np.zeros((block, args.batch, args.context), np.float32), batch_axes=2,
                    label="lm_next")
    batch = oc.static_index("batch")
    model = make_model(vocab, args.context, args.d_model, args.heads, args.blocks)
    logits = model(xs.batch_slice(batch))
    loss = oc.nn.cross_entropy(logits, oc.nn.one_hot(ys.batch_slice(batch), vocab))
    schedule = oc.lr_cosine(args.lr, args.steps, warmup_steps=min(100, args.steps // 10),
                            min_lr=args.lr / 10)
    ctx = oc.Context(backend=args.backend)
    train_step = ctx.compile([oc.grad_update(loss),
                              oc.adam_update(loss, learning_rate=schedule,
                                             weight_decay=args.weight_decay)])

    # Held-out loss: the same model on a fixed set of held-out windows, one forward routine.
    n_eval = 64
    eval_starts = np.linspace(0, len(held) - args.context - 2, n_eval).astype(np.int64)
    ex, ey = windows(held, eval_starts, args.context)
    with oc.nn.eval_mode():
        eval_loss = oc.nn.cross_entropy(model(oc.ndarray(ex, batch_axes=1, label="eval_ids")),
                                        oc.nn.one_hot(oc.ndarray(ey, batch_axes=1), vocab))
    evaluate = ctx.compile(eval_loss.forward)

    def held_out_loss() -> float:
        evaluate()
        return float(ctx.get(eval_loss).reshape(-1)[0])

    step0 = 0
    state_path = Path(args.checkpoint).with_suffix(".json")
    if args.resume and Path(args.checkpoint).exists():
        ctx.load(args.checkpoint)
        step0 = json.loads(state_path.read_text())["step"]
        log(f"resumed from {args.checkpoint} at step {step0}")

    log(f"{len(train)} training / {len(held)} held-out characters, vocabulary {vocab}, "
        f"{n_params(loss)} parameters; first held-out loss "
        f"{held_out_loss():.4f} (ln {vocab} = {math.log(vocab):.4f})")
    stop = args.steps if args.stop_at is None else min(args.stop_at, args.steps)
    bar = tqdm(range(step0, stop), desc="steps", initial=step0, total=args.steps)
    for step in bar:
        used = step % block
        if step == step0 or used == 0:
            # The data order is a function of the step alone, so a resumed run sees the same
            # batches as an uninterrupted one.
            rng = np.random.default_rng([args.seed, step // block])
            starts = rng.integers(0, len(train) - args.context - 1, (block * args.batch,))
            bx, by = windows(train, starts, args.context)
            ctx.set(xs, bx.reshape(block, args.batch, args.context))
            ctx.set(ys, by.reshape(block, args.batch, args.context))
        train_step(batch=used)
        if hasattr(bar, "set_postfix") and step % 25 == 0:
            bar.set_postfix(loss=f"{float(ctx.get(loss).reshape(-1)[0]):.3f}")
        if (step + 1) % args.eval_every == 0:
            log(f"step {step + 1:5d}  train loss {float(ctx.get(loss).reshape(-1)[0]):.4f}  "
                f"held-out loss {held_out_loss():.4f}")
        if args.save_every and (step + 1) % args.save_every == 0:
            ctx.save(args.checkpoint)
            state_path.write_text(json.dumps({"step": step + 1}))

    final = held_out_loss()
    sample(ctx, model, train, args, vocab)
    print(f"time: {time.perf_counter() - start:.1f}s")
    print(f"held-out loss: {final:.4f}")


def sample(ctx: oc.Context, model: Callable[[oc.Tensor], oc.Tensor], train: np.ndarray,
           args: argparse.Namespace, vocab: int) -> None:
    """Sample a few lines: the model on one window of ids; the window is filled left to right
    (the model is causal, so the unfilled positions to the right change nothing before them)."""
    window = oc.ndarray(np.zeros((1, args.context), np.float32), batch_axes=1, label="prompt")
    with oc.nn.eval_mode():
        probs = oc.nn.softmax(model(window))
    run = ctx.compile(probs.forward)
    rng = np.random.default_rng(args.seed)
    for _ in range(args.samples):
        start = int(rng.integers(0, len(train) - 8))
        ids = list(train[start:start + 8].astype(int))    # an 8-character prompt
        while len(ids) < args.context and CHARS[ids[-1]] != "\n":
            ctx.set(window, np.array([ids + [0] * (args.context - len(ids))], np.float32))
            run()
            p = ctx.get(probs).reshape(args.context, vocab)[len(ids) - 1].astype(np.float64)
            ids.append(int(rng.choice(vocab, p=p / p.sum())))
        print("sample:", repr(decode(ids)))


if __name__ == "__main__":
    main()
