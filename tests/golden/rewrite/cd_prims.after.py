# ruff: noqa
# mypy: ignore-errors
def prims(v, a, b, c):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("relu", a)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("exp", a + b)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("neg", a)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("where", c, a, 0.0)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("fma", a, b, c)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("max", a, b)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", a)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", 0.0)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", __oc__.literal([1.0, 2.0]))))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("mul", (a + b), c)))
    __oc_code.add(__oc__.accum(v, "=:", __oc__.prim("id", helper(a, b))))
    return __oc_code.result()
