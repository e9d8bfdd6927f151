# ruff: noqa
# mypy: ignore-errors
def pointwise(a, b, k):
    return -(a * b) / (a ** k) + b - a
