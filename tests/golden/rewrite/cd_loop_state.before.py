# ruff: noqa
# mypy: ignore-errors
# State declared in a loop: one node per iteration, named under the loop's parameter

@cd
def momentum_all(params, lr, mom):
    for i, p in enumerate(params):
        {vel}[...] = mom * vel + p.grad
        p -= lr * vel
