# ruff: noqa
# mypy: ignore-errors
def misc(y, x, p, n):
    acc = __oc__.node("acc", owner=(y, p))
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("exp", x), logic="...|...->...,i=>...|...->...,i", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("neg", x), logic=f"i,{n}=>i,", span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=+", __oc__.prim("id", x), logic="i,=>i,", span=__oc_spans__[2]))
    __oc_code.add(__oc__.accum(acc, "=:@-", __oc__.prim("id", x), logic="i,j=>i,", span=__oc_spans__[3]))
    __oc_code.add(__oc__.accum(y, "=:*", __oc__.prim("id", x), logic="i,j=>i,", span=__oc_spans__[4]))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("where", x, x, p), logic="i,j;j,i;i,j=>i,j", span=__oc_spans__[5]))
    return __oc_code.result()
