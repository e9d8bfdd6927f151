# ruff: noqa
# mypy: ignore-errors
def matmul(a, b, c):
    m = __oc__.einsum("i,j;j,k=>i,k", a, b)
    t = __oc__.einsum("i,j;j,k;k,l=>i,l", a, b, c)
    outer = __oc__.einsum("i,;j,=>i,j", a, b)
    return m + t + outer
