# ruff: noqa
# mypy: ignore-errors
# DESIGN: `{ w = 0.5 }` is `{w := 0.5}`; a numeric display init is a literal

@op
def param_init(x):
    return {w := 0.5} * x + {v := [1.0, 2.0]} + {u := uniform()}
