# ruff: noqa
# mypy: ignore-errors
def compose(a, b):
    return a @ b
