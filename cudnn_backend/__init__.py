"""cuDNN 9 backend (ctypes over libcudnn.so.9, CuPy for device memory): not implemented yet.

It arrives with its own issue and will expose the reference's classes over real cuDNN. Until then
``available()`` says so, and every suite that needs it skips with that reason.
"""

from __future__ import annotations

NOT_IMPLEMENTED = "the cuDNN backend is not implemented yet (ctypes over libcudnn.so.9 comes with its own issue)"


def available() -> tuple[bool, str]:
    """``(False, reason)`` until the backend exists; never raises."""
    return False, NOT_IMPLEMENTED


__all__ = ["available"]
