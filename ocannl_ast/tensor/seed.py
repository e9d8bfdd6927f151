"""The process-wide seed keying every parameter's default random initialization
(`oc.set_seed`; seed 001). Input: an int. Output: the 32-bit seed `initialization` reads."""

from __future__ import annotations

from . import validate

_seed = [0]  #: the current seed (a list: tests read and restore it in place)


def set_seed(seed: int) -> None:
    """The global seed keying every parameter's random initialization.

    Example: ``oc.set_seed(42)``.
    """
    validate.check_seed(seed)
    _seed[0] = int(seed) & 0xFFFFFFFF


def current_seed() -> int:
    """The seed set last (0 at first)."""
    return _seed[0]
