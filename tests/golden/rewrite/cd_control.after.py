# ruff: noqa
# mypy: ignore-errors
def control(ps, rate):
    __oc_code = __oc__.code_collector()
    count = 0
    for p in ps:
        if p is None:
            continue
        __oc_code.add(__oc__.accum(p, "=-", __oc__.prim("mul", rate, __oc__.grad_of(p)), span=__oc_spans__[0]))
        count = count + 1
    while False:
        break

    def zero(q):
        __oc_code.add(__oc__.accum(__oc__.grad_of(q), "=:", __oc__.prim("id", 0.0), span=__oc_spans__[1]))

    for p in ps:
        __oc_code.include(zero(p))
    if count == 0:
        return __oc_code.result()
    __oc_code.include(print("updated", count))
    return __oc_code.result()
