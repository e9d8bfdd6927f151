"""One OpenMP parallel region per routine call: the C backend's entry point opens it once and
every thread of the team runs the step in it, instead of a fork and a join per parallel
loop and per threaded kernel call.

Stage: rendering (`c_backend`, for the C dialect with ``OCANNL_AST_THREADS`` > 1). Input:
the routine's functions (`c_backend._Part`), each either for the whole team (parallel loops
as orphaned ``omp for`` worksharing loops, threaded kernel calls sharing their tiles or batch
cells the same way: `CRenderer.team`) or serial. Output: the entry point's lines:

    serial functions up to the first team function, as without threads (they hold the
      static arguments' bound checks: an error returns before anything else runs);
    #pragma omp parallel num_threads(T)
    {  #pragma omp master  { serial functions, in order }  (one thread; no barrier after)
       #pragma omp barrier                                   (before a team function only)
       team function (every thread; each worksharing loop ends with a barrier) ...  }

so a step synchronizes once per parallel loop or threaded kernel call, plus once per run
of serial functions before one. An error code inside the region (a kernel out of memory) is
kept, the first one wins (`ocannl_keep_rc`), and returned after it: no thread may leave the
region early (the others would wait at a barrier forever). Each cell is still computed by
one thread in the order one thread alone computes it: the same bits at any thread count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: The helper keeping the first nonzero error code of the region (relaxed: the region's
#: closing barrier publishes it).
KEEP_RC = ("static inline void ocannl_keep_rc(int* rc, int e) {\n"
           "  int zero = 0;\n"
           "  if (e) __atomic_compare_exchange_n(rc, &zero, e, 0, __ATOMIC_RELAXED, "
           "__ATOMIC_RELAXED);\n}\n")


class Part(Protocol):
    """What the entry point needs of a routine's function (`c_backend._Part`)."""

    @property
    def checked(self) -> bool: ...
    @property
    def team(self) -> bool: ...
    @property
    def index_checks(self) -> bool: ...


def usable(parts: Sequence[Part]) -> bool:
    """Whether the region applies: some function is for the team, and no bound check of a
    static argument comes after the first one (an early return must stay possible)."""
    first = next((k for k, p in enumerate(parts) if p.team), None)
    return first is not None and not any(p.index_checks for p in parts[first:])


def entry_lines(parts: Sequence[Part], calls: Sequence[str], team: int) -> list[str]:
    """The entry point's body (after its signature, before its epilogue): `calls[k]` calls
    function k. Example: ``entry_lines(parts, ["f0(bufs[0])", ...], 2)``."""
    first = next(k for k, p in enumerate(parts) if p.team)
    out = [f"  if ((rc = {c}) != 0) return rc;" if p.checked else f"  {c};"
           for p, c in zip(parts[:first], calls[:first])]
    out += ["  int ocannl_rc = 0;", f"#pragma omp parallel num_threads({team})", "  {"]
    serial: list[str] = []

    def flush() -> None:
        if serial:
            out.extend(["#pragma omp master", "    {", *serial, "    }"])
            serial.clear()

    for k in range(first, len(parts)):
        p, c = parts[k], calls[k]
        line = f"ocannl_keep_rc(&ocannl_rc, {c});" if p.checked else f"{c};"
        if p.team:
            if serial:
                flush()
                out.append("#pragma omp barrier")
            out.append(f"    {line}")
        else:
            serial.append(f"      {line}")
    flush()
    return [*out, "  }", "  return ocannl_rc;"]
