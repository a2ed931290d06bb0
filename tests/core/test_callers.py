"""Caller-aware answers are decided per calling module, never shared between look-alike functions."""
from ascend_shim import callers

SOURCE = "def ask():\n    return probe()\n"


def _function(module_name, probe):
    namespace = {"__name__": module_name, "probe": probe}
    exec(compile(SOURCE, "<same file name>", "exec"), namespace)
    return namespace["ask"]


def test_identical_functions_in_a_native_library_and_user_code_get_their_own_answers():
    probe = lambda: callers.caller_is_native(depth=2)  # noqa: E731 - the frame asking is ask()
    callers.register_native("shimtest_native_lib")
    try:
        library_ask = _function("shimtest_native_lib.module", probe)
        user_ask = _function("user_module", probe)
        assert library_ask.__code__ == user_ask.__code__  # equal by value: the trap a value-keyed cache falls in
        assert library_ask() is True
        assert user_ask() is False
        assert library_ask() is True
    finally:
        callers.unregister_native("shimtest_native_lib")
    assert library_ask() is False


def test_native_scope_marks_everything_inside_as_native():
    ask = _function("user_module", lambda: callers.caller_is_native(depth=2))
    assert ask() is False
    with callers.native_scope():
        assert ask() is True
    assert ask() is False
