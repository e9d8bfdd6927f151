"""Shared nest functions: top-level statements of a routine that differ only in which
buffers they touch and where their cells lie in them (a transformer's blocks, the optimizer
update of each parameter of one shape) are compiled once, as one C function the routine's
parts call with those buffers and offsets. gcc's time grows with the lines it optimizes,
and such repeats are a large share of a deep model's step.

Stage: rendering (`c_backend`). Input: each top-level statement rendered with its cell
offsets marked (`CRenderer.offset_marks`): `Nest`. Output (`share`): the definitions of the
shared functions (`Shared`) and, per statement that calls one, the call line; every other
statement is emitted as before (`literal`).

Two statements share a function when their texts are equal once program buffers, static
arguments, loop counters and locals are renamed in order of first appearance and each
distinct (buffer, offset) of a cell index is numbered the same way (a "slot"). A slot whose
offset differs between the statements becomes an ``int64_t`` parameter; one the same in all
keeps its number. So does the extent of a loop at the statement's outermost level (the
optimizer update of parameters of several sizes: one loop over each one's cells). The function's buffers are the same distinct pointers (``restrict``) as
the statements': it computes the same operations in the same order, so the same bits. A
written buffer with an offset parameter must have no other slot (gcc cannot tell unknown
offsets apart, and would version the loop on an alias check): else the statements stay.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["MIN_LINES", "Nest", "Shared", "literal", "share"]

#: The fewest lines (comments not counted) a statement needs to be shared: below, the call
#: costs gcc about what the statement does.
MIN_LINES = 3

_MARK = re.compile(r"( \+ )?\x01(\d+)\x01")
#: a loop of the statement's outermost level (`c_backend` indents a part's body once): its
#: extent may become a parameter
_OUTER_LOOP = re.compile(r"^(  for \(int64_t (\w+) = 0; \2 < )(\d+)(; \+\+\2\) \{)$", re.MULTILINE)
_EXTENT = re.compile(r"\x03(\d+)\x03")
_SLOT = re.compile(r"( \+ )?\x02(\d+)\x02")
#: a mark, or a word starting at a word boundary with a letter or ``_``: the tokens of
#: ``\x01\d+\x01|\b[A-Za-z_]\w*\b``, written to start with one character set (which the
#: regex engine scans for quickly: a third of the time) -- the mark when that character is
#: \x01, else the word when no word character precedes it
_TOKEN = re.compile(r"([\x01A-Za-z_](?:(?<=\x01)\d+\x01|(?<=[A-Za-z_])(?<!\w\w)\w*))")
#: the renderer's names of loop counters, scalar locals and local arrays (`c_lanes`,
#: `c_reorder`): declared inside the statement that uses them
_LOCAL = re.compile(r"i\d+|l_\w+|ocannl_(?:lane|red)\w*")
#: text that ties a statement to its function or routine: it is never shared
_UNSHAREABLE = ("return", "#pragma omp", "static ", "ocannl_err", "ocannl_mm")


@dataclass(slots=True)
class Nest:
    """A top-level statement as rendered with offset marks."""

    lines: list[str]
    marks: list[tuple[str, int]]  #: per mark: the buffer's C name and the offset
    written: frozenset[str]  #: C names of the program buffers it writes
    shareable: bool  #: not for the routine's thread team, no bound check


@dataclass(frozen=True, slots=True)
class Shared:
    """A shared nest function: ``int name(buffers..., statics..., offsets...)``."""

    name: str
    buffers: tuple[tuple[str, str], ...]  #: (C element type, parameter name)
    statics: tuple[str, ...]  #: parameter names (``int64_t``)
    offsets: tuple[str, ...]  #: parameter names (``int64_t``)
    body: tuple[str, ...]


def _offset(value: int, lead: bool) -> str:
    """`value` as `CRenderer.affine` ends an index: after terms (`lead`) or alone."""
    if not lead:
        return str(value)
    return "" if value == 0 else f" {'-' if value < 0 else '+'} {abs(value)}"


def literal(lines: Sequence[str], marks: Sequence[tuple[str, int]]) -> list[str]:
    """The statement's lines with each offset mark back as its number: the text the renderer
    gives without marks."""
    if not marks:
        return list(lines)
    out = []
    for ln in lines:
        if "\x01" in ln:
            pieces = _MARK.split(ln)  # [text, lead, mark, text, lead, mark, ..., text]
            for j in range(1, len(pieces), 3):
                pieces[j] = _offset(marks[int(pieces[j + 1])][1], pieces[j] is not None)
                pieces[j + 1] = ""
            ln = "".join(pieces)
        out.append(ln)
    return out


@dataclass(slots=True)
class _Canon:
    key: tuple[str, tuple[str, ...]]  #: the renamed text and its buffers' types
    buffers: list[str]  #: C names, in parameter order
    statics: list[str]
    slots: list[tuple[int, int]]  #: per slot: (buffer parameter position, offset)
    extents: list[int]  #: of its outermost loops, in order


def _canon(nest: Nest, types: dict[str, str], statics: frozenset[str], text: str,
           kept: set[str] | None = None) -> _Canon:
    """The statement renamed (`text`: its lines joined). `kept`: words found earlier to
    be no buffer, static or local (keywords, helpers), grown here (one set per `share`)."""
    if kept is None:
        kept = set()
    extents: list[int] = []

    def extent(m: re.Match[str]) -> str:
        extents.append(int(m.group(3)))
        return f"{m.group(1)}\x03{len(extents) - 1}\x03{m.group(4)}"

    if "  for (" in text:
        text = _OUTER_LOOP.sub(extent, text)
    bufs: dict[str, str] = {}
    stats: dict[str, str] = {}
    locs: dict[str, str] = {}
    slots: dict[tuple[str, int], int] = {}
    seen: dict[str, str] = {}  #: word -> its replacement (itself if kept)
    # one split of the whole text: [text, token, text, token, ..., text]; each distinct
    # token renamed once, in order of first appearance
    pieces = _TOKEN.split(text)
    tokens = pieces[1::2]
    for word in dict.fromkeys(tokens):
        if word in kept:
            seen[word] = word
            continue
        if word[0] == "\x01":
            mark = nest.marks[int(word[1:-1])]
            slot = slots.get(mark)
            if slot is None:
                slot = slots[mark] = len(slots)
            got = f"\x02{slot}\x02"
        elif word in types:
            got = bufs[word] = f"ocannl_dp{len(bufs)}"
        elif word in statics:
            got = stats[word] = f"ocannl_ds{len(stats)}"
        elif _LOCAL.fullmatch(word):
            got = locs[word] = f"ocannl_dv{len(locs)}"
        else:
            got = word
            kept.add(word)
        seen[word] = got
    pieces[1::2] = [seen[w] for w in tokens]
    text = "".join(pieces)
    order = list(bufs)
    pos = {name: k for k, name in enumerate(order)}
    return _Canon((text, tuple(types[b] for b in order)), order, list(stats),
                  [(pos[name], off) for name, off in slots], extents)


def _code_lines(lines: Sequence[str]) -> int:
    return len(lines) - sum(1 for ln in lines if ln.endswith("*/") and ln.lstrip().startswith("/*"))


def share(nests: Sequence[Nest], prefix: str, types: dict[str, str],
          statics: frozenset[str]) -> tuple[list[Shared], dict[int, str]]:
    """The shared functions of `nests` (named ``<prefix>_n<k>``) and the call line of each
    statement that calls one (by position in `nests`). `types`: the C element type of each
    program buffer's parameter, by C name; `statics`: the static arguments' C names."""
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, _Canon]]] = {}
    kept: set[str] = set()
    for k, nest in enumerate(nests):
        if not nest.shareable or len(nest.lines) < MIN_LINES:  # (a routine's notes: one line)
            continue
        text = "\n".join(nest.lines)
        if any(w in text for w in _UNSHAREABLE) or _code_lines(nest.lines) < MIN_LINES:
            continue
        canon = _canon(nest, types, statics, text, kept)
        groups.setdefault(canon.key, []).append((k, canon))
    functions: list[Shared] = []
    calls: dict[int, str] = {}
    for (text, btypes), members in groups.items():
        if len(members) < 2:
            continue
        first = members[0][1]
        varying = [s for s in range(len(first.slots))
                   if len({m.slots[s][1] for _, m in members}) > 1]
        if not _safe(first, varying, members, nests):
            continue
        name = f"{prefix}_n{len(functions)}"
        param = {s: f"ocannl_do{j}" for j, s in enumerate(varying)}
        spans = [e for e in range(len(first.extents))
                 if len({m.extents[e] for _, m in members}) > 1]
        bound = {e: f"ocannl_dn{j}" for j, e in enumerate(spans)}

        # each slot as its parameter or its (common) offset: one split of the whole text,
        # [text, lead, slot, text, lead, slot, ..., text] (no slot spans lines)
        pieces = _SLOT.split(text)
        for j in range(1, len(pieces), 3):
            k, lead = int(pieces[j + 1]), pieces[j] is not None
            pieces[j] = (f" + {param[k]}" if lead else param[k]) if k in param \
                else _offset(first.slots[k][1], lead)
            pieces[j + 1] = ""
        text = "".join(pieces)
        if first.extents:  # each outer extent as its parameter or its (common) value
            pieces = _EXTENT.split(text)  # [text, extent, text, extent, ..., text]
            pieces[1::2] = [bound.get(int(e)) or str(first.extents[int(e)])
                            for e in pieces[1::2]]
            text = "".join(pieces)
        body = tuple(text.split("\n"))
        functions.append(Shared(name, tuple((t, f"ocannl_dp{j}") for j, t in enumerate(btypes)),
                                tuple(f"ocannl_ds{j}" for j in range(len(first.statics))),
                                (*(param[s] for s in varying), *bound.values()), body))
        for k, m in members:
            args = [*m.buffers, *m.statics, *(str(m.slots[s][1]) for s in varying),
                    *(str(m.extents[e]) for e in spans)]
            calls[k] = f"  {name}({', '.join(args)});"
    return functions, calls


def _safe(first: _Canon, varying: list[int], members: list[tuple[int, _Canon]],
          nests: Sequence[Nest]) -> bool:
    """No written buffer has an offset parameter beside another slot of it."""
    written = {p for k, m in members for p, name in enumerate(m.buffers)
               if name in nests[k].written}
    for p in written:
        mine = [s for s, (b, _) in enumerate(first.slots) if b == p]
        if any(s in varying for s in mine) and len(mine) > 1:
            return False
    return True
