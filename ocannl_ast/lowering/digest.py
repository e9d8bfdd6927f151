"""Content-derived names for routines: a digest of the loop program (stage: after the last
loop-IR pass). Input: a `LoopProgram`; output: a short hex digest that depends only on what
the program computes, never on what else the process built before (ids, counters)."""

from __future__ import annotations

import dataclasses
import hashlib

from .loop_ir import LoopProgram
from .loop_print import print_program

#: hex digits of the digest kept in a routine's name (48 bits: collisions only cost a
#: second cache entry's name, never a wrong routine — the cache is keyed by the source)
DIGEST_DIGITS = 12


def program_digest(prog: LoopProgram) -> str:
    """A digest of the program's deterministic text (symbols renumbered, buffers by name and
    dims), ignoring its name: equal programs built in any order get equal digests.

    >>> from ocannl_ast.lowering.loop_ir import Buffer, Fill
    >>> a = LoopProgram("a", (Buffer(0, "x", (2,)),), (), Fill(Buffer(0, "x", (2,)), 0.0))
    >>> b = LoopProgram("b", (Buffer(8, "x", (2,)),), (), Fill(Buffer(8, "x", (2,)), 0.0))
    >>> program_digest(a) == program_digest(b)
    True
    """
    text = print_program(dataclasses.replace(prog, name=""))
    flags = "".join("u" if b.uint4x32 else "f" for b in prog.buffers)
    return hashlib.sha256(f"{text}\n{flags}".encode()).hexdigest()[:DIGEST_DIGITS]


def content_name(stem: str, prog: LoopProgram) -> str:
    """`stem` followed by the program's digest: ``routine_3fa2c1d09b7e``."""
    return f"{stem}_{program_digest(prog)}"
