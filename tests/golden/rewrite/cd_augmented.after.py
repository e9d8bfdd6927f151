# ruff: noqa
# mypy: ignore-errors
def augmented(v, a, b, p):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=+", __oc__.prim("mul", a, b), span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(v, "=-", __oc__.prim("id", a), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(v, "=*", __oc__.prim("id", b), span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(v, "=/", __oc__.prim("id", 2.0), span=__oc_spans__[3]))
    __oc_code.add(__oc__.accum(v, "=**", __oc__.prim("id", a), span=__oc_spans__[4]))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=+", __oc__.prim("id", a), span=__oc_spans__[5]))
    __oc_code.add(__oc__.accum(v, "=+", __oc__.prim("mul", a, b), span=__oc_spans__[6]))
    return __oc_code.result()
