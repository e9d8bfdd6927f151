# ruff: noqa
# mypy: ignore-errors
# DESIGN: declarations are hoisted out of the returned lambda (shared across calls)

@op
def mlp_layer(hid_dim):
    return lambda x: relu({w} @ x + {b, o := [hid_dim]})
