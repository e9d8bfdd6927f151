# ruff: noqa
# mypy: ignore-errors
# slot names: `{x_rhs1}` and `{lhs_x}` get slot=; identifiers are left to the builder

@cd
def slot_names(t, t1, t2, g, g1, g2, projections):
    {sum_rhs1}[...] = max(add(t1, t2))
    {cond_rhs1}[...] = eq(t, sum_rhs1)
    {lhs_mask}[...] = t
    {rhs_copy}[...] = t1
    {x_rhs2, slot := "rhs2"}[...] = t2
    g1 += where(cond_rhs1, g, 0.0)
    g2 += where(cond_rhs1, g, 0.0)
