# ruff: noqa
# mypy: ignore-errors
def interleave(y, x):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("id", x), logic="i,=>2*i,", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(y, "=:", __oc__.prim("id", x), logic="i,=>2*i+1,", span=__oc_spans__[1]))
    return __oc_code.result()
