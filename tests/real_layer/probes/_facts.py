"""The probes' one output form: ``key = value`` per observed fact (an exception's type is a fact too)."""


def fact(key, fn):
    try:
        value = fn()
    except Exception as exc:  # the error's type is part of the contract
        value = f"raises {type(exc).__name__}"
    print(f"{key} = {value}")
