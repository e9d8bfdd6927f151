# ruff: noqa
# mypy: ignore-errors
def mlp_layer(hid_dim):
    w = __oc__.param("w")
    b = __oc__.param("b", output_dims=[hid_dim])
    return lambda x: relu(w @ x + b)
