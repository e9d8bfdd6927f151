# ruff: noqa
# mypy: ignore-errors
def matmul(c, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(c, "=:+", __oc__.prim("mul", a, b), logic="i,k;k,j=>i,j", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(c, "=+", __oc__.prim("id", a), logic="i,j=>i,j", span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(c, "=+", __oc__.prim("id", a), logic="i,j=>i,", span=__oc_spans__[2]))
    return __oc_code.result()
