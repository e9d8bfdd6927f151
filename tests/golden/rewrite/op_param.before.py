# ruff: noqa
# mypy: ignore-errors
# DESIGN: `{ w }` is `{w}`: an inline param, uniform random init

@op
def inline_param(x):
    return {w} @ x
