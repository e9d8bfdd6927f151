# ruff: noqa
# mypy: ignore-errors
def conv(out, x, w, stride):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(out, "=:+", __oc__.prim("mul", x, w), logic="o+k,;k,=>o,", span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(out, "=:+", __oc__.prim("mul", x, w), logic=f"{stride}*o+k,;k,=>o,", span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(out, "=:@^", __oc__.prim("add", x, w), logic="2*o+k,;k,=>o,", span=__oc_spans__[2]))
    return __oc_code.result()
