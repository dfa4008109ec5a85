"""The cuDNN backend's availability contract (the backend itself comes with its own issue)."""

from __future__ import annotations

import cudnn_backend


def test_available_never_raises_and_says_why_not():
    ok, why = cudnn_backend.available()
    assert ok is False
    assert "not implemented" in why
