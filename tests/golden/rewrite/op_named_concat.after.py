# ruff: noqa
# mypy: ignore-errors
def concatenate(x, z):
    y = __oc__.concat("a,;b,=>a^b,", x, z)
    head = __oc__.einsum("a^b,=>a,", y)
    return head
