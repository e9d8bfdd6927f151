# ruff: noqa
# mypy: ignore-errors
# at the top of an RHS, `*` is pointwise Mul and `@` is Mul with compose logic

@cd
def compose(v, a, b):
    v[...] = sum(a @ b)
    v[...] = a * b
    v[...] = a @ (b * a)
