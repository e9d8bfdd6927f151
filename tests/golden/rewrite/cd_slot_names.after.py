# ruff: noqa
# mypy: ignore-errors
def slot_names(t, t1, t2, g, g1, g2, projections):
    sum_rhs1 = __oc__.node("sum_rhs1", slot="rhs1")
    cond_rhs1 = __oc__.node("cond_rhs1", slot="rhs1")
    lhs_mask = __oc__.node("lhs_mask", slot="lhs")
    rhs_copy = __oc__.node("rhs_copy", slot="rhs1")
    x_rhs2 = __oc__.node("x_rhs2", slot="rhs2")
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(sum_rhs1, "=:@^", __oc__.prim("add", t1, t2), projections=projections, span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(cond_rhs1, "=:", __oc__.prim("eq", t, sum_rhs1), projections=projections, span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(lhs_mask, "=:", __oc__.prim("id", t), projections=projections, span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(rhs_copy, "=:", __oc__.prim("id", t1), projections=projections, span=__oc_spans__[3]))
    __oc_code.add(__oc__.accum(x_rhs2, "=:", __oc__.prim("id", t2), projections=projections, span=__oc_spans__[4]))
    __oc_code.add(__oc__.accum(g1, "=+", __oc__.prim("where", cond_rhs1, g, 0.0), projections=projections, span=__oc_spans__[5]))
    __oc_code.add(__oc__.accum(g2, "=+", __oc__.prim("where", cond_rhs1, g, 0.0), projections=projections, span=__oc_spans__[6]))
    return __oc_code.result()
