# ruff: noqa
# mypy: ignore-errors
# named index: affine indices (stride, dilation, offset); bound names spliced via f-string

@op
def conv(x, w, stride, dilation):
    out[o] = sum[k](x[o + k] * w[k])
    strided[o] = sum[k](x[2*o + k] * w[k])
    general[o] = sum[k](x[stride*o + dilation*k] * w[k])
    shifted[i] = x[i + 1]
    return out + strided + general + shifted
