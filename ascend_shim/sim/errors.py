"""The emulator's own error: a real NPU feature or torch_npu API that the sim backend does not emulate."""


class NotEmulatedError(NotImplementedError):
    """Raised where the real NPU would work but ascend_shim's sim backend does not emulate the feature.

    ``NotImplementedError`` is a ``RuntimeError`` subclass, so code catching the hardware's RuntimeError still
    catches it; the message always says it is a limitation of the emulator, not of the hardware.
    ``NotEmulatedError(message)``, or ``NotEmulatedError(op, what)`` for a feature of a fused op.
    """

    def __init__(self, subject: str, what: str | None = None):
        if what is not None:
            subject = (f"{subject}: {what} is not emulated by ascend_shim's sim backend (the real NPU op accepts "
                       "it; run on hardware or avoid the feature)")
        super().__init__(subject)
