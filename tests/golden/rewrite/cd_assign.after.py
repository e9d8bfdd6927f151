# ruff: noqa
# mypy: ignore-errors
def assign(v, a, b):
    __oc_code = __oc__.code_collector()
    scale = 2.0
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("add", a, b), span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", scale, a), span=__oc_spans__[1]))
    return __oc_code.result()
