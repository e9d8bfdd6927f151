# ruff: noqa
# mypy: ignore-errors
def pools(a, b):
    m = __oc__.einsum_max("i,j=>i,", a, span=__oc_spans__[0])
    t = __oc__.einsum_max("i,j;j,=>i,", a, b, span=__oc_spans__[1])
    return m + t
