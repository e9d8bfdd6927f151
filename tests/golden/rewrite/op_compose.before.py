# ruff: noqa
# mypy: ignore-errors
# DESIGN: `a * b` (OCANNL compose) is `a @ b`; left unchanged

@op
def compose(a, b):
    return a @ b
