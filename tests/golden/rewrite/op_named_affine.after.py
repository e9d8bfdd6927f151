# ruff: noqa
# mypy: ignore-errors
def conv(x, w, stride, dilation):
    out = __oc__.einsum("o+k,;k,=>o,", x, w)
    strided = __oc__.einsum("2*o+k,;k,=>o,", x, w)
    general = __oc__.einsum(f"{stride}*o+{dilation}*k,;k,=>o,", x, w)
    shifted = __oc__.einsum("i+1,=>i,", x)
    return out + strided + general + shifted
