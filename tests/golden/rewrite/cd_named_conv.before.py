# ruff: noqa
# mypy: ignore-errors
# named index: `out[o] = sum[k](x[o + k] * w[k])`, strides as values, max pooling

@cd
def conv(out, x, w, stride):
    out[o] = sum[k](x[o + k] * w[k])
    out[o] = sum[k](x[stride*o + k] * w[k])
    out[o] = max[k](x[2*o + k] + w[k])
