# ruff: noqa
# mypy: ignore-errors
# OCANNL's sgd_one written in the dialect (Python control flow runs at build time)

@cd
def sgd_one(p, learning_rate, momentum=0.0, weight_decay=0.0, nesterov=False):
    """One SGD step for parameter p."""
    {sgd_delta}[...] = p.grad + weight_decay * p
    if momentum > 0.0:
        {sgd_momentum}[...] = momentum * sgd_momentum + sgd_delta
        if nesterov:
            sgd_delta += momentum * sgd_momentum
        else:
            sgd_delta[...] = sgd_momentum
    p -= learning_rate * sgd_delta
