# ruff: noqa
# mypy: ignore-errors
def einsum_calls(a, b):
    s = einsum("ij=>i", a)
    p = einsum("ij;jk=>ik", a, b)
    m = einsum_max("ij=>i", a)
    t = einsum_max("...|2*o<+w; w=>...|o", a, b)
    return concat("a;b=>a^b", s, m)
