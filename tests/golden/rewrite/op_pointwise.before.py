# ruff: noqa
# mypy: ignore-errors
# DESIGN: pointwise `*. /. **. + - ~-` are `* / ** + -` and unary `-`; unchanged

@op
def pointwise(a, b, k):
    return -(a * b) / (a ** k) + b - a
