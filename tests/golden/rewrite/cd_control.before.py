# ruff: noqa
# mypy: ignore-errors
# Python control flow, local defs, bare-name bindings and call statements

@cd
def control(ps, rate):
    count = 0
    for p in ps:
        if p is None:
            continue
        p -= rate * p.grad
        count = count + 1
    while False:
        break

    def zero(q):
        q.grad[...] = 0.0

    for p in ps:
        zero(p)
    if count == 0:
        return
    print("updated", count)
