# ruff: noqa
# mypy: ignore-errors
def misc(y, x, p, n):
    acc = __oc__.node("acc", "misc")
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("exp", x), logic="...|...->...,i=>...|...->...,i"))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("neg", x), logic=f"i,{n}=>i,"))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=+", __oc__.prim("id", x), logic="i,=>i,"))
    __oc_code.add(__oc__.accum(acc, "=:@-", __oc__.prim("id", x), logic="i,j=>i,"))
    __oc_code.add(__oc__.accum(y, "=:*", __oc__.prim("id", x), logic="i,j=>i,"))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("where", x, x, p), logic="i,j;j,i;i,j=>i,j"))
    return __oc_code.result()
