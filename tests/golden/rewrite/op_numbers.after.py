# ruff: noqa
# mypy: ignore-errors
def numbers(x, n):
    return 2.0 * x + n - 1
