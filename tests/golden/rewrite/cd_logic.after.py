# ruff: noqa
# mypy: ignore-errors
def logic(v, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@", span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("add", a, b), logic="ij;ij=>ij", span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("relu", a), logic="T", span=__oc_spans__[3]))
    return __oc_code.result()
