# ruff: noqa
# mypy: ignore-errors
def explicit(v, a, b, p):
    tmp = __oc__.node("tmp", owner=(p,))
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:@^", __oc__.prim("add", a, b), logic="...|i=>...|i", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=+", __oc__.prim("mul", a, b), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(tmp, "=:", __oc__.prim("relu", a), span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(v, "=:||", __oc__.prim("or_", a, b), span=__oc_spans__[3]))
    return __oc_code.result()
