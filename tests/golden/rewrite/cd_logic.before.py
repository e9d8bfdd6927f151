# ruff: noqa
# mypy: ignore-errors
# DESIGN: `~logic:"spec"` on the primitive call or on the reducer moves to accum

@cd
def logic(v, a, b):
    v[...] = sum(mul(a, b, logic="@"))
    v[...] = sum(a * b, logic="@")
    v[...] = add(a, b, logic="ij;ij=>ij")
    v[...] = relu(a, logic="T")
