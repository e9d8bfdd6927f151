"""Data parallelism over processes and hosts (`import ocannl_ast.distributed as ocd`): join
the launcher's world, shard data, train with gradients averaged across ranks, checkpoint.
MPI through mpi4py (the `dist` extra), gloo through torch.distributed, or a world of one;
the core package never imports this package. See docs/distributed.md.

Example::

    world = ocd.init()
    ctx.set(x, ocd.shard(xs))
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.1))
    step()
"""

from __future__ import annotations

from ..errors import DistributedError
from .checkpoint import Resume, load, save
from .data_parallel import DataParallelStep, Timings, data_parallel
from .shard import round_robin, shard
from .world import World, init

__all__ = [
    "DataParallelStep",
    "DistributedError",
    "Resume",
    "Timings",
    "World",
    "data_parallel",
    "init",
    "load",
    "round_robin",
    "save",
    "shard",
]
