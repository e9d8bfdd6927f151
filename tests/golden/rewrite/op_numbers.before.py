# ruff: noqa
# mypy: ignore-errors
# DESIGN: `!.x`, `!..n`, `2.0` are Python numbers; they stay numbers

@op
def numbers(x, n):
    return 2.0 * x + n - 1
