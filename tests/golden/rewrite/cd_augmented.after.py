# ruff: noqa
# mypy: ignore-errors
def augmented(v, a, b, p):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=+", __oc__.prim("mul", a, b)))
    __oc_code.add(__oc__.accum(v, "=-", __oc__.prim("id", a)))
    __oc_code.add(__oc__.accum(v, "=*", __oc__.prim("id", b)))
    __oc_code.add(__oc__.accum(v, "=/", __oc__.prim("id", 2.0)))
    __oc_code.add(__oc__.accum(v, "=**", __oc__.prim("id", a)))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=+", __oc__.prim("id", a)))
    __oc_code.add(__oc__.accum(v, "=+", __oc__.prim("mul", a, b)))
    return __oc_code.result()
