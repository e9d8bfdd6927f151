# ruff: noqa
# mypy: ignore-errors
def matmul(a, b, c):
    m = __oc__.einsum("i,j;j,k=>i,k", a, b, span=__oc_spans__[0])
    t = __oc__.einsum("i,j;j,k;k,l=>i,l", a, b, c, span=__oc_spans__[1])
    outer = __oc__.einsum("i,;j,=>i,j", a, b, span=__oc_spans__[2])
    return m + t + outer
