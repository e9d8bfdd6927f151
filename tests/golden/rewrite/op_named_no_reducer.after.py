# ruff: noqa
# mypy: ignore-errors
def rearrange(x):
    w = __oc__.param("w")
    t = __oc__.einsum("i,j=>j,i", x, span=__oc_spans__[0])
    first = __oc__.einsum("i,0=>i,", x, span=__oc_spans__[1])
    any_ = __oc__.einsum("i,_=>i,", x, span=__oc_spans__[2])
    scaled = __oc__.einsum("o,i;i,=>o,", w, x, span=__oc_spans__[3])
    return t + first + any_ + scaled
