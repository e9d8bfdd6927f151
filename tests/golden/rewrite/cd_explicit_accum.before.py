# ruff: noqa
# mypy: ignore-errors
# DESIGN: any accumulation operator verbatim: `accum(v, "=:@^", e, logic=...)`

@cd
def explicit(v, a, b, p):
    accum(v, "=:@^", add(a, b), logic="...|i=>...|i")
    accum(p.grad, "=+", a * b)
    accum({tmp}, "=:", relu(a))
    accum(v, "=:||", or_(a, b))
