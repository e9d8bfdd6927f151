# ruff: noqa
# mypy: ignore-errors
# outermost operation: unary/binary/ternary primitives by name, unary minus, `id` otherwise

@cd
def prims(v, a, b, c):
    v[...] = relu(a)
    v[...] = exp(a + b)
    v[...] = -a
    v[...] = where(c, a, 0.0)
    v[...] = fma(a, b, c)
    v[...] = max(a, b)
    v[...] = a
    v[...] = 0.0
    v[...] = [1.0, 2.0]
    v[...] = (a + b) * c
    v[...] = helper(a, b)
