# ruff: noqa
# mypy: ignore-errors
def logic(v, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@"))
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b), logic="@"))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("add", a, b), logic="ij;ij=>ij"))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("relu", a), logic="T"))
    return __oc_code.result()
