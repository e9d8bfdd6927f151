"""`oc.nn`: first layers and losses, written in the `@op` dialect (inline params `{w}`).

Conventions: `x` has batch axes and its features in the output row; "the last output axis"
is the feature (class) axis. Layers are factories: each call mints fresh parameters, every
use of the returned layer shares them. Losses return a one-cell tensor.

Input: tensors. Output: tensors (layers: callables from tensor to tensor).
"""

# Written in the @op dialect: names declared inline ({w}) exist after rewriting.
# ruff: noqa: F821, F841
# mypy: ignore-errors

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

from .errors import ArgumentError, OcannlError, ShapeError
from .infer.terms import dim_size
from .layer_mode import eval_mode, is_training  # noqa: F401  (eval_mode: oc.nn.eval_mode)
from .naming import scope as name_scope
from .rewrite import make_decorator
from .tensor import id_checks, validate
from .tensor.init_strategies import FanInOf, kaiming_uniform, normal
from .tensor.leaves import param
from .tensor.node import Tensor
from .tensor.ops import (
    binary_op,
    einsum,
    einsum_max,
    eq,
    exp,
    le,
    log,
    lt,
    range_,
    recip,
    relu,
    sqrt,
    stop_gradient,
    tanh,
    where,
)
from .tensor.ops.fetch import embed_dim, range_over_offsets
from .tensor.precisions import inherit_ids
from .tensor.rank_streams import rank_offset
from .tensor.schedules import step_counter

op = make_decorator("op", "ocannl_ast.tensor.dsl")
cd = make_decorator("cd", "ocannl_ast.tensor.dsl")

Layer = Callable[[Tensor], Tensor]

# Reduce the last output axis, keeping it as a size-1 axis (keepdims) so that the result
# broadcasts back along the axis it came from (docs/einsum.md, the reduction pitfall).
_LAST_KEEP = "..b..|..o..,i=>..b..|..o..,_"
# Scale the last output axis by a vector (gain / bias of layer_norm).
_LAST_SCALE = "..b..|..o..,i;i=>..b..|..o..,i"
# Sum every cell into one.
_ALL = "..b..|..i..->..o..=>0"
# A linear map of the last output axis f, position-wise over the other output axes.
_LINEAR = "..b..|..s..,f; f->o => ..b..|..s..,o"


def linear(out_dim: int, *, bias: bool = True) -> Layer:
    """`layer(x) = x w + b` over the LAST output axis of `x` only, as torch.nn.Linear: x
    `B|s,f` gives `B|s,out_dim` (each position on its own) with the weight `w: f->out_dim`
    (f inferred from `x`); x `B|f` gives `B|out_dim`. Init as torch: w and b uniform in
    +-1/sqrt(f). (`{w} @ x` contracts every output axis, for those who want that.)"""
    _check_dim("linear", "out_dim", out_dim)
    _check_bool("linear", "bias", bias)
    with name_scope("linear"):  # params: linear.w, linear.b (linear_1.w, ... for the next)
        w = param("w", output_dims=[out_dim], init=kaiming_uniform())
        b = param("b", output_dims=[out_dim], init=FanInOf(w)) if bias else None

    def layer(x: Tensor) -> Tensor:
        validate.check_tensor("linear", "x", x)
        y = einsum(_LINEAR, x, w)
        return y if b is None else y + b

    return layer


def mlp(dims: Sequence[int], activation: Callable[[Tensor], Tensor] = relu) -> Layer:
    """Linear layers of output sizes `dims`, `activation` between them (not after the
    last); position-wise as `linear` (each acts on the last output axis). Example:
    ``model = oc.nn.mlp([16, 16, 1])``."""
    if not isinstance(dims, list | tuple) or not dims:
        validate.fail(ArgumentError, "mlp: dims must be a non-empty list of positive ints, "
                                     f"got {validate.describe(dims)}")
    for i, d in enumerate(dims):
        _check_dim("mlp", f"dims[{i}]", d)
    validate.check_callable("mlp", "activation", activation)
    with name_scope("mlp"):  # params: mlp.linear.w, mlp.linear_1.w, ...
        layers = [linear(d) for d in dims]

    def model(x: Tensor) -> Tensor:
        for i, layer in enumerate(layers):
            x = layer(x) if i == 0 else layer(activation(x))
        return x

    return model


def flatten(x: Tensor) -> Tensor:
    """All output axes of `x` merged into one, row-major as numpy's reshape: `B|h,w,c`
    gives `B|h*w*c` (batch axes kept). Its gradient un-flattens. The output axes of `x` are
    those inferred when it is called (they must be known then: they are once its inputs'
    dims are, e.g. after a conv stack on data); flatten fixes them (a later broadcast of `x`
    to more axes is a ShapeError), and `x` has no input axes."""
    validate.check_tensor("flatten", "x", x)
    dims = _known_output_dims(x)
    labels = [f"a{i}" for i in range(len(dims))] if len(dims) > 1 else ["i"]  # "a0" alone
    # would read as two single-character axes
    if x.shape.rows_now()[1].var is not None or len(dims) == 1:
        # pin the output row to exactly these axes (a copy when there is nothing to merge)
        x = einsum(f"..b..|{','.join(labels)} => ..b..|{','.join(labels)}", x)
    # Merge the last two axes (h, w) into one of size h * w, index `w_size * h + w`, until
    # one is left: each step a copy through an affine index; gradients gather back.
    while len(dims) > 1:
        keep = "".join(f"{a}," for a in labels[:-2])
        x = einsum(f"..b..|{keep}h,w => ..b..|{keep}{dims[-1]}*h+w", x)
        dims, labels = [*dims[:-2], dims[-2] * dims[-1]], labels[:-1]
    return x


def _known_output_dims(x: Tensor) -> list[int]:
    """The output dims of `x` as inferred so far: the axes after its row variable, when
    there are none before it and every size is known. Otherwise `x` is closed first (as
    `oc.infer_shapes`): a size-1 axis computed from size-1 axes (`conv2d(1, 3)`) is known
    only then; if closing fails or leaves them open, the ShapeError says what to give."""
    def read() -> list[int | None] | None:
        row = x.shape.rows_now()[1]
        sizes = [dim_size(d) for d in row.dims]
        return None if row.beg or not sizes or any(n is None for n in sizes) else sizes
    sizes = read()
    if sizes is None:
        from .tensor.pipeline import close_tensors

        shape = str(x.shape)
        try:
            close_tensors([x], dependencies=True)
            sizes = read()
        except OcannlError:
            sizes = None
        if sizes is None:
            validate.fail(ShapeError, f"flatten: the output dims of '{x.label}' are not "
                                      f"known (shape so far: {shape}); flatten needs them "
                                      "when it is called (give the input data or term its dims)")
    return [int(n) for n in sizes]  # type: ignore[arg-type]


@op
def softmax(x):
    """Softmax over the last output axis, stable: the row max is subtracted first."""
    e = exp(x - stop_gradient(einsum_max(_LAST_KEEP, x)))
    return e / einsum(_LAST_KEEP, e)


@op
def log_softmax(x):
    """Log-softmax over the last output axis: `z - log(sum(exp(z)))`, `z = x - max(x)`."""
    z = x - stop_gradient(einsum_max(_LAST_KEEP, x))
    return z - log(einsum(_LAST_KEEP, exp(z)))


@op
def cross_entropy(logits, targets):
    """`-sum(targets * log_softmax(logits))` over the last output axis, averaged over the
    batch (and any other axes): a one-cell tensor. `targets`: one-hot, the logits' shape."""
    per_example = einsum("..b..|..o..,i;..b..|..o..,i=>..b..|..o..", targets,
                         log_softmax(logits))
    return -_mean(per_example)


_cross_entropy_op = cross_entropy


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """`-sum(targets * log_softmax(logits))` over the last output axis, averaged over the
    batch (and any other axes): a one-cell tensor. `targets`: one-hot, the logits' shape.
    A shape clash names what cross_entropy expects (not only its inner einsum)."""
    try:
        return _cross_entropy_op(logits, targets)  # type: ignore[no-any-return]
    except ShapeError as e:
        shapes = (f"logits {logits.shape.describe()}, targets {targets.shape.describe()}"
                  if isinstance(logits, Tensor) and isinstance(targets, Tensor) else "")
        raise ShapeError(f"cross_entropy: targets must be one-hot vectors with the logits' "
                         f"shape ({shapes}; e.g. oc.nn.one_hot(ids, vocab), and flatten "
                         f"features before the last layer): {e.message}", e.span) from None


@op
def mse(pred, target):
    """Mean squared error over every cell: a one-cell tensor."""
    d = pred - target
    return _mean(d * d)


@op
def layer_norm(eps=1e-5):
    """Normalize over the last output axis (mean 0, variance 1, biased variance as in
    PyTorch), then scale by a learned gain (init 1) and shift by a learned bias (init 0),
    both vectors over that axis. Stable in float32: a constant row gives exactly the bias
    and an exactly zero gain gradient, as PyTorch."""
    validate.check_nonnegative("layer_norm", "eps", eps)

    def layer(x):
        # Centered in two passes, means as sum / n: the first mean's rounding error (from
        # the sum, or from sum * recip(n)) leaves a residue that 1/sqrt(eps) would amplify
        # (a constant row of 100.0 came out 0.5% off the bias); the residue of a constant
        # row is one exactly representable step, which the second pass removes exactly.
        n = embed_dim(x)
        x1 = x - einsum(_LAST_KEEP, x) / n
        xc = x1 - einsum(_LAST_KEEP, x1) / n
        var = einsum(_LAST_KEEP, xc * xc) / n
        normalized = xc * recip(sqrt(var + eps))
        return einsum(_LAST_SCALE, normalized, {ln_gain := 1.0}) + einsum("i=>i", {ln_bias := 0.0})

    return layer


def _mean(t: Tensor) -> Tensor:
    """The mean of every cell of `t` (the count is the sum of a ones tensor shaped like
    `t`, so it follows `t`'s inferred shape)."""
    ones = 0.0 * stop_gradient(t) + 1.0
    return einsum(_ALL, t) / einsum(_ALL, ones)


def _check_bool(fn: str, name: str, v: Any) -> None:
    if not isinstance(v, bool):
        validate.fail(ArgumentError, f"{fn}: {name} must be a bool, got {validate.describe(v)}")


def _check_dim(fn: str, name: str, d: Any) -> None:
    if not validate.is_int(d) or d <= 0:
        validate.fail(ArgumentError, f"{fn}: {name} must be a positive int, got "
                                     f"{validate.describe(d)}")


def _pair(fn: str, name: str, v: Any) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each positive."""
    pair = tuple(v) if isinstance(v, list | tuple) else (v, v)
    if len(pair) != 2:
        validate.fail(ArgumentError, f"{fn}: {name} must be an int or a pair of ints, got "
                                     f"{validate.describe(v)}")
    for d in pair:
        _check_dim(fn, name, d)
    return pair[0], pair[1]


def _window_spec(sh: int, sw: int, mode: str, kernel: str, out: str) -> str:
    """`..b..|sh*oh<+kh, sw*ow<+kw, c[; kernel] => ..b..|oh, ow, out` (`=+` when padded)."""
    m = "=" if mode == "same" else "<"
    return f"..b..|{sh}*oh{m}+kh, {sw}*ow{m}+kw, c{kernel} => ..b..|oh, ow, {out}"


def conv2d(out_channels: int, kernel_size: Any, *, stride: Any = 1,
           padding: str = "same") -> Layer:
    """2-D convolution of `x` (batch|height, width, channels): kernel `kh, kw, in_ch ->
    out_ch` (in_ch inferred from `x`) plus a bias over out_ch. PyTorch output sizes:
    "same" zero-pads, output = input / stride (the input must divide); "valid" has
    output = (input - kernel) / stride + 1 (the windows must tile the input exactly)."""
    _check_dim("conv2d", "out_channels", out_channels)
    kh, kw = _pair("conv2d", "kernel_size", kernel_size)
    sh, sw = _pair("conv2d", "stride", stride)
    if padding not in ("same", "valid"):
        validate.fail(ArgumentError, 'conv2d: padding must be "same" or "valid", got '
                                     f"{validate.describe(padding)}")
    spec = _window_spec(sh, sw, padding, "; kh, kw, c -> oc", "oc")
    with name_scope("_conv_layer"):  # init as torch: U(+-1/sqrt(kh * kw * in_ch)) for both
        kernel = param("kernel", output_dims=[out_channels], init=kaiming_uniform())
        bias = param("bias", output_dims=[out_channels], init=FanInOf(kernel))

    def layer(x: Tensor) -> Tensor:
        validate.check_tensor("conv2d", "x", x)
        _check_image("conv2d", x)
        # The window sizes pin the kernel's spatial axes.
        return einsum(spec, x, kernel, window={"kh": kh, "kw": kw}) + bias

    return layer


def _check_image(fn: str, x: Tensor) -> None:
    """`x` as batch|height,width,channels where its output row is already known."""
    out = x.shape.raw_rows()[1]
    if out.var is None and len(out.beg) + len(out.dims) != 3:
        validate.fail(ShapeError, f"{fn}: x must be batch|height,width,channels (channels "
                      f"last), got '{x.label}' of shape {x.shape.describe()} (batch_axes= "
                      "of oc.ndarray marks the leading batch axes)")


def max_pool2d(window: Any, *, stride: Any = None) -> Layer:
    """Max over `window` x `window` patches of `x` (batch|height, width, channels), no
    padding; `stride` defaults to the window. The windows must tile the input exactly."""
    spec, kh, kw = _pool_spec("max_pool2d", window, stride)
    return lambda x: einsum_max(spec, _image("max_pool2d", x), window={"kh": kh, "kw": kw})


def avg_pool2d(window: Any, *, stride: Any = None) -> Layer:
    """Mean over `window` x `window` patches of `x` (batch|height, width, channels), no
    padding; `stride` defaults to the window. The windows must tile the input exactly."""
    spec, kh, kw = _pool_spec("avg_pool2d", window, stride)
    return lambda x: einsum(spec, _image("avg_pool2d", x), window={"kh": kh, "kw": kw}) / float(
        kh * kw)


def _image(fn: str, x: Any) -> Any:
    """`x`, checked as conv2d checks its input where it is a tensor (`_check_image`)."""
    if isinstance(x, Tensor):
        _check_image(fn, x)
    return x


def _pool_spec(fn: str, window: Any, stride: Any) -> tuple[str, int, int]:
    kh, kw = _pair(fn, "window", window)
    sh, sw = (kh, kw) if stride is None else _pair(fn, "stride", stride)
    return _window_spec(sh, sw, "valid", "", "c"), kh, kw


# --- attention ----------------------------------------------------------------------------

#: Project features f to heads h and head dims d, per sequence position s.
_PROJ = "..b..|s,f; f->h,d => ..b..|s,h,d"
#: Attention scores: query position s, key position t (last, the softmax axis), per head.
_SCORES = "..b..|s,h,d; ..b..|t,h,d => ..b..|h,s,t"
#: Reduce the key axis t, keeping it as a size-1 axis (as _LAST_KEEP).
_KEY_KEEP = "..b..|h,s,t => ..b..|h,s,_"
#: Mix the values with the attention weights.
_MIX = "..b..|h,s,t; ..b..|t,h,d => ..b..|s,h,d"
#: Output projection back to the input features (the third operand, ones shaped like x,
#: ties the output features to x's).
_OUT = "..b..|s,h,d; h,d->f; ..b..|s,f => ..b..|s,f"
#: A masked score: exp of it underflows to exactly 0 in float32 and float64.
_MASKED = -1e9


def multi_head_attention(num_heads: int, head_dim: int, *, causal: bool = False) -> Layer:
    """Self-attention: `layer(x)`, x of shape batch|seq,features, returns batch|seq,features.

    Per head h: `q = x Wq_h, k = x Wk_h, v = x Wv_h` (no biases), weights
    `softmax(q k^T / sqrt(head_dim))` over the key positions (stable: the row max is
    subtracted), output `sum_h (weights v) Wo_h`. Params: `wq, wk, wv` (features ->
    num_heads, head_dim) and `wo` (num_heads, head_dim -> features), initialized as
    torch.nn.Linear projections, U(+-1/sqrt(fan_in)). With `causal=True`,
    position s attends to positions t <= s only: the mask compares the positions' indices
    (computed in the routine, any sequence length) and replaces masked scores by -1e9
    before the max, so they get exactly zero weight and zero gradient."""
    _check_dim("multi_head_attention", "num_heads", num_heads)
    _check_dim("multi_head_attention", "head_dim", head_dim)
    _check_bool("multi_head_attention", "causal", causal)
    return _attention(num_heads, head_dim, causal, 1.0 / math.sqrt(head_dim))


@op
def _attention(num_heads, head_dim, causal, scale):
    def layer(x):
        q = einsum(_PROJ, x, {wq := kaiming_uniform(), o := [num_heads, head_dim]})
        k = einsum(_PROJ, x, {wk := kaiming_uniform(), o := [num_heads, head_dim]})
        v = einsum(_PROJ, x, {wv := kaiming_uniform(), o := [num_heads, head_dim]})
        scores = einsum(_SCORES, q, k) * scale
        if causal:
            scores = where(_causal_mask(x), scores, _MASKED)
        e = exp(scores - stop_gradient(einsum_max(_KEY_KEEP, scores)))
        weights = e / einsum(_KEY_KEEP, e)
        ones = 0.0 * stop_gradient(x) + 1.0
        out = einsum(_MIX, weights, v)
        return einsum(_OUT, out, {wo := kaiming_uniform(), i := [num_heads, head_dim]}, ones)

    return layer


def _causal_mask(x: Tensor) -> Tensor:
    """1 where key position t <= query position s, else 0 (output axes s, t), sized by the
    sequence axis of `x` (batch|seq,features)."""
    ones_s = einsum("..b..|s,f => s", 0.0 * stop_gradient(x)) + 1.0
    pos = einsum("s; s => s", ones_s, range_over_offsets())
    return le(einsum("s; t => s,t", ones_s, pos), einsum("s; t => s,t", pos, ones_s))


# --- embedding, activations, dropout ------------------------------------------------------


def one_hot(ids: Tensor, vocab: int) -> Tensor:
    """One-hot vectors of integer ids: a new last output axis of size `vocab`, 1.0 at the
    id's position. Ids are float cells holding integers (exact below 2**24 in float32).
    An id outside [0, vocab), or a NaN, infinite or fractional one, is a RuntimeDataError
    (checked on the data the ids come from, when it is built and each time ctx.set writes
    it); ids the routine computes itself are not checked and give a zero vector there."""
    validate.check_tensor("one_hot", "ids", ids)
    _check_dim("one_hot", "vocab", vocab)
    id_checks.mark_ids(ids, "one_hot", vocab)
    # integer ids (`precision="uint32"`): the copies and the range are stored as integers
    # too, exact in a 16-bit context (`tensor.precisions.inherit_ids`)
    expanded = inherit_ids(einsum("..b..|..o..; v => ..b..|..o..,v",
                                  inherit_ids(stop_gradient(ids), ids),
                                  0.0 * range_(vocab) + 1.0), ids)
    return eq(expanded, inherit_ids(range_(vocab), ids))


def embedding(vocab: int, dim: int) -> Layer:
    """Embedding lookup: `layer(ids)` maps integer ids (a tensor batch|seq, float cells
    holding ints) to vectors: batch|seq,dim, row `id` of a learned table (vocab -> dim).
    The lookup is `one_hot(ids, vocab)` contracted with the table, so only the looked-up
    rows get gradient; an id outside [0, vocab) is a RuntimeDataError. The table starts
    normal(0, 1), as torch.nn.Embedding."""
    _check_dim("embedding", "vocab", vocab)
    _check_dim("embedding", "dim", dim)
    return _embedding(vocab, dim)


@op
def _embedding(vocab, dim):
    return lambda ids: einsum("..b..|..o..,v; v->d => ..b..|..o..,d", one_hot(ids, vocab),
                              {emb_table := normal(1.0), o := [dim], i := [vocab]})


_GELU_C = math.sqrt(2.0 / math.pi)


@op
def gelu(x):
    """GELU, the tanh approximation (as PyTorch's `approximate="tanh"`):
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`."""
    return 0.5 * x * (1.0 + tanh(_GELU_C * (x + 0.044715 * (x * x * x))))


@cd
def _threefry_op(v, v1, v2, projections):
    v[...] = threefry4x32(v1, v2)


#: threefry4x32(key, counter) stored as a number: word 0 of the result, in [0, 2**32)
_threefry = binary_op(_threefry_op, None, name="threefry_bits")
_DROPOUT_IDS = itertools.count()


def dropout(rate: float, *, seed: int = 0) -> Callable[..., Tensor]:
    """Inverted dropout: `layer(x, train=None)` zeroes each cell with probability `rate`
    and scales the kept ones by `1 / (1 - rate)`; identity at eval time (`train=False`,
    or `train=None` inside `oc.nn.eval_mode()`).

    The mask is counter-based (threefry4x32), computed in the routine from `seed`, the
    layer's creation ordinal, the cell's offset and the layer's step counter (a
    context-held `oc.step_counter`, `layer.step`, which the optimizer update increments):
    the same seed and step give the same mask, each step a new one. Uses of one layer
    within a step share the mask; separate dropout layers have independent masks.

    Under `ocd.data_parallel` rank r of N offsets its cell counters by r times the cells
    it drops from (`tensor.rank_streams`): the ranks' masks differ, and together they are
    the mask one process would draw over the whole batch; a world of one draws exactly
    the masks of a plain process."""
    validate.check_arg_number("dropout", "rate", rate)
    if not 0.0 <= rate < 1.0:
        validate.fail(ArgumentError, f"dropout: rate must be in [0, 1), got {rate!r}")
    if not validate.is_int(seed) or not 0 <= seed < 2**24:
        validate.fail(ArgumentError, "dropout: seed must be an int in [0, 2**24), got "
                                     f"{validate.describe(seed)}")
    step = step_counter("dropout_step")
    key = _threefry(float(seed), float(next(_DROPOUT_IDS) % 2**24))

    def layer(x: Tensor, *, train: bool | None = None) -> Tensor:
        validate.check_tensor("dropout", "x", x)
        if not is_training("dropout", train) or rate == 0.0:
            return x
        return _dropout(x, rate, _threefry(key, step))

    layer.step = step  # type: ignore[attr-defined]
    return layer


@op
def _dropout(x, rate, step_key):
    same = "..b..|..i..->..o..; ..b..|..i..->..o.. => ..b..|..i..->..o.."
    offsets = einsum(same, range_over_offsets(), 0.0 * stop_gradient(x) + 1.0) + rank_offset(x)
    u = _threefry(step_key, offsets) * (2.0 ** -32)
    keep = stop_gradient(lt(rate, u))
    return x * keep * (1.0 / (1.0 - rate))


# --- models beyond toys: positions and batch norm live in their own modules
from .layers_norm import batch_norm  # noqa: F401
from .layers_positions import positional_embedding, rope, sinusoidal_positions  # noqa: F401
