# ruff: noqa
# mypy: ignore-errors
def pools(a, b):
    m = __oc__.einsum_max("i,j=>i,", a)
    t = __oc__.einsum_max("i,j;j,=>i,", a, b)
    return m + t
