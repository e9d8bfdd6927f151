# ruff: noqa
# mypy: ignore-errors
def sgd_one(p, learning_rate, momentum=0.0, weight_decay=0.0, nesterov=False):
    """One SGD step for parameter p."""
    sgd_delta = __oc__.node("sgd_delta", owner=(p,))
    sgd_momentum = __oc__.node("sgd_momentum", owner=(p,))
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(sgd_delta, "=:", __oc__.prim("add", __oc__.grad_of(p), weight_decay * p), span=__oc_spans__[0]))
    if momentum > 0.0:
        __oc_code.add(__oc__.accum(sgd_momentum, "=:", __oc__.prim("add", momentum * sgd_momentum, sgd_delta), span=__oc_spans__[1]))
        if nesterov:
            __oc_code.add(__oc__.accum(sgd_delta, "=+", __oc__.prim("mul", momentum, sgd_momentum), span=__oc_spans__[2]))
        else:
            __oc_code.add(__oc__.accum(sgd_delta, "=:", __oc__.prim("id", sgd_momentum), span=__oc_spans__[3]))
    __oc_code.add(__oc__.accum(p, "=-", __oc__.prim("mul", learning_rate, sgd_delta), span=__oc_spans__[4]))
    return __oc_code.result()
