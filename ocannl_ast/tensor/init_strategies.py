"""Init strategies (`oc.init`): how a param's initial values are drawn, with
torch.nn.init's semantics. A strategy is resolved once the param's dims are inferred: fan_in
is the product of its input dims, fan_out the product of its output dims (1 for an empty
row). The draw itself is `random_init`'s counter-based threefry stream, deterministic per
`oc.set_seed` and the param's name.

Input: strategy arguments; at init time a param Tensor with closed shape.
Output: a `Dist` (uniform bounds or normal mean / std) for `random_init`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ArgumentError, ShapeError, user_span
from ..records import record
from . import validate
from .node import Tensor


@record
class Dist:
    """A resolved distribution: uniform in [low, high), or normal(mean, std)."""

    normal: bool
    low: float = 0.0  #: uniform
    high: float = 0.0  #: uniform
    mean: float = 0.0  #: normal
    std: float = 0.0  #: normal


def fans(p: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a param with closed shape: products of its input and output
    dims. Example: a linear weight `f->o` has fans (f, o)."""
    _b, o, i = p.layout_rows()
    return math.prod(i), math.prod(o)


class InitStrategy:
    """Base of the `oc.init` strategies: `resolve(param)` gives the distribution."""

    __slots__ = ()

    def resolve(self, p: Tensor) -> Dist:
        raise TypeError(f"{type(self).__name__} does not define resolve")  # pragma: no cover


@record
class Uniform(InitStrategy):
    low: float
    high: float

    def resolve(self, p: Tensor) -> Dist:
        return Dist(False, low=self.low, high=self.high)


@record
class Normal(InitStrategy):
    std: float
    mean: float

    def resolve(self, p: Tensor) -> Dist:
        return Dist(True, mean=self.mean, std=self.std)


@record
class Kaiming(InitStrategy):
    """torch.nn.init.kaiming_{uniform,normal}_ with nonlinearity="leaky_relu" (gain
    sqrt(2 / (1 + a^2))): std = gain / sqrt(fan), uniform bound sqrt(3) * std."""

    a: float
    mode: str
    normal: bool

    def resolve(self, p: Tensor) -> Dist:
        fan_in, fan_out = fans(p)
        fan = fan_in if self.mode == "fan_in" else fan_out
        _nonzero(p, fan, self.mode)
        std = math.sqrt(2.0 / (1.0 + self.a * self.a)) / math.sqrt(fan)
        if self.normal:
            return Dist(True, std=std)
        bound = math.sqrt(3.0) * std
        return Dist(False, low=-bound, high=bound)


@record
class Xavier(InitStrategy):
    """torch.nn.init.xavier_{uniform,normal}_: std = gain * sqrt(2 / (fan_in + fan_out)),
    uniform bound sqrt(3) * std."""

    gain: float
    normal: bool

    def resolve(self, p: Tensor) -> Dist:
        fan_in, fan_out = fans(p)
        _nonzero(p, fan_in + fan_out, "fan_in + fan_out")
        std = self.gain * math.sqrt(2.0 / (fan_in + fan_out))
        if self.normal:
            return Dist(True, std=std)
        bound = math.sqrt(3.0) * std
        return Dist(False, low=-bound, high=bound)


@record(eq=False)
class FanInOf(InitStrategy):
    """U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the fan_in of another param (`weight`): the
    bias init of torch.nn.Linear and Conv2d."""

    weight: Tensor

    def resolve(self, p: Tensor) -> Dist:
        from .pipeline import close_tensors

        close_tensors([self.weight])
        fan_in, _ = fans(self.weight)
        _nonzero(self.weight, fan_in, "fan_in")
        bound = 1.0 / math.sqrt(fan_in)
        return Dist(False, low=-bound, high=bound)


def _nonzero(p: Tensor, fan: int, what: str) -> None:
    if fan <= 0:
        raise ShapeError(f"'{p.label}': cannot scale its init by {what} = {fan} (an axis of "
                         "size 0)", user_span())


def _real(fn: str, name: str, v: Any, *, nonneg: bool = False) -> float:
    if not validate.is_real(v) or isinstance(v, bool | np.bool_) or not math.isfinite(float(v)) \
            or (nonneg and float(v) < 0):
        validate.fail(ArgumentError, f"{fn}: {name} must be a finite"
                                     f"{' non-negative' if nonneg else ''} number, got "
                                     f"{validate.describe(v)}")
    return float(v)


def _mode(fn: str, mode: Any) -> str:
    if mode not in ("fan_in", "fan_out"):
        validate.fail(ArgumentError, f'{fn}: mode must be "fan_in" or "fan_out", got '
                                     f"{validate.describe(mode)}")
    return str(mode)


def uniform(low: float = -1.0, high: float = 1.0) -> InitStrategy:
    """U(low, high), as torch.nn.init.uniform_. Example: ``oc.init.uniform(-0.1, 0.1)``."""
    lo, hi = _real("init.uniform", "low", low), _real("init.uniform", "high", high)
    if lo > hi:
        validate.fail(ArgumentError, f"init.uniform: low must be <= high, got low={low!r}, "
                                     f"high={high!r}")
    return Uniform(lo, hi)


def normal(std: float = 1.0, mean: float = 0.0) -> InitStrategy:
    """N(mean, std^2), as torch.nn.init.normal_. Example: ``oc.init.normal(0.02)``."""
    return Normal(_real("init.normal", "std", std, nonneg=True),
                  _real("init.normal", "mean", mean))


def kaiming_uniform(a: float = 5 ** 0.5, *, mode: str = "fan_in") -> InitStrategy:
    """torch.nn.init.kaiming_uniform_ (leaky_relu gain): U(+-sqrt(6 / ((1 + a^2) fan))).
    The default a = sqrt(5) is torch.nn.Linear's weight init, U(+-1/sqrt(fan_in))."""
    return Kaiming(_real("init.kaiming_uniform", "a", a), _mode("init.kaiming_uniform", mode),
                   False)


def kaiming_normal(a: float = 0.0, *, mode: str = "fan_in") -> InitStrategy:
    """torch.nn.init.kaiming_normal_ (leaky_relu gain): N(0, 2 / ((1 + a^2) fan))."""
    return Kaiming(_real("init.kaiming_normal", "a", a), _mode("init.kaiming_normal", mode),
                   True)


def xavier_uniform(gain: float = 1.0) -> InitStrategy:
    """torch.nn.init.xavier_uniform_: U(+-gain * sqrt(6 / (fan_in + fan_out)))."""
    return Xavier(_real("init.xavier_uniform", "gain", gain, nonneg=True), False)


def xavier_normal(gain: float = 1.0) -> InitStrategy:
    """torch.nn.init.xavier_normal_: N(0, gain^2 * 2 / (fan_in + fan_out))."""
    return Xavier(_real("init.xavier_normal", "gain", gain, nonneg=True), True)
