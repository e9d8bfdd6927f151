# ruff: noqa
# mypy: ignore-errors
def with_projections(t, t1, t2, g, g1, projections):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(t, "=:", __oc__.prim("mul", t1, t2), projections=projections, span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(g1, "=+", __oc__.prim("mul", g, t2), projections=projections, span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(g1, "=+", __oc__.prim("mul", g, t2), logic="@", span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(t, "=:", __oc__.prim("add", t1, t2), projections=other, span=__oc_spans__[3]))
    return __oc_code.result()
