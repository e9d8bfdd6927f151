# ruff: noqa
# mypy: ignore-errors
def compose(v, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", a, b), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", a, (b * a)), logic="@", span=__oc_spans__[2]))
    return __oc_code.result()
