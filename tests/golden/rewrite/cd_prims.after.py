# ruff: noqa
# mypy: ignore-errors
def prims(v, a, b, c):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("relu", a), span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("exp", a + b), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("neg", a), span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("where", c, a, 0.0), span=__oc_spans__[3]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("fma", a, b, c), span=__oc_spans__[4]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("max", a, b), span=__oc_spans__[5]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", a), span=__oc_spans__[6]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", 0.0), span=__oc_spans__[7]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", __oc__.literal([1.0, 2.0])), span=__oc_spans__[8]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", (a + b), c), span=__oc_spans__[9]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", helper(a, b)), span=__oc_spans__[10]))
    return __oc_code.result()
