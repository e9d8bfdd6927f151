# ruff: noqa
# mypy: ignore-errors
# DESIGN: `~projections:p` likewise; a `projections` parameter applies to every accum without logic

@cd
def with_projections(t, t1, t2, g, g1, projections):
    t[...] = t1 * t2
    g1 += g * t2
    g1 += sum(g @ t2)
    t[...] = add(t1, t2, projections=other)
