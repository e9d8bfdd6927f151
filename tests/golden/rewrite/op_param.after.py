# ruff: noqa
# mypy: ignore-errors
def inline_param(x):
    w = __oc__.param("w")
    return w @ x
