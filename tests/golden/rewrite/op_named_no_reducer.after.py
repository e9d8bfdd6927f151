# ruff: noqa
# mypy: ignore-errors
def rearrange(x):
    w = __oc__.param("w", "rearrange")
    t = __oc__.einsum("i,j=>j,i", x)
    first = __oc__.einsum("i,0=>i,", x)
    any_ = __oc__.einsum("i,_=>i,", x)
    scaled = __oc__.einsum("o,i;i,=>o,", w, x)
    return t + first + any_ + scaled
