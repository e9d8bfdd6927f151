# ruff: noqa
# mypy: ignore-errors
def reducers(v, a, b):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(v, "=:+", __oc__.prim("mul", a, b)))
    __oc_code.add(__oc__.accum(v, "=:*", __oc__.prim("id", a)))
    __oc_code.add(__oc__.accum(v, "=:@^", __oc__.prim("add", a, b)))
    __oc_code.add(__oc__.accum(v, "=:@-", __oc__.prim("sub", a, b)))
    return __oc_code.result()
