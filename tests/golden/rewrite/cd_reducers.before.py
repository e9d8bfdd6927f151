# ruff: noqa
# mypy: ignore-errors
# DESIGN: `=:+ =:* =:@^ =:@-` are `sum(e)`, `prod(e)`, `max(e)`, `min(e)`

@cd
def reducers(v, a, b):
    v[...] = sum(a * b)
    v[...] = prod(a)
    v[...] = max(a + b)
    v[...] = min(a - b)
