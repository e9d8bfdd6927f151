# ruff: noqa
# mypy: ignore-errors
def compose(v, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@"))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", a, b)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", a, (b * a)), logic="@"))
    return __oc_code.result()
