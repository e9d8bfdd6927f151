# ruff: noqa
# mypy: ignore-errors
def param_fields(x, h):
    w = __oc__.param("w", input_dims=[3], output_dims=[h], batch_dims=[2], label=["layer"])
    bias = __oc__.param("bias", output_dims=[h], input_dims=[], batch_dims=[])
    layer = w
    return layer @ x + bias
