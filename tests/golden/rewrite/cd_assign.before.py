# ruff: noqa
# mypy: ignore-errors
# DESIGN: `v =: e` is `v[...] = e`; bare-name `x = ...` stays a Python binding

@cd
def assign(v, a, b):
    scale = 2.0
    v[...] = a + b
    v[...] = scale * a
