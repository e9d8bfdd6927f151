# ruff: noqa
# mypy: ignore-errors
def parts(y, x, z):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("id", x), logic="a,=>a^b,", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("id", z), logic="b,=>a^b,", span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(x, "=:", __oc__.prim("id", y), logic="a^b,=>a,", span=__oc_spans__[2]))
    return __oc_code.result()
