# ruff: noqa
# mypy: ignore-errors
def conv(x, w, stride, dilation):
    out = __oc__.einsum("o+k,;k,=>o,", x, w, span=__oc_spans__[0])
    strided = __oc__.einsum("2*o+k,;k,=>o,", x, w, span=__oc_spans__[1])
    general = __oc__.einsum(f"{stride}*o+{dilation}*k,;k,=>o,", x, w, span=__oc_spans__[2])
    shifted = __oc__.einsum("i+1,=>i,", x, span=__oc_spans__[3])
    return out + strided + general + shifted
