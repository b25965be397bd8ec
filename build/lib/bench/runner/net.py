"""The loopback port helper, one home for it. Torch-free: the launcher and the worker use it."""
from __future__ import annotations

import socket


def free_loopback_port() -> int:
    """A port on 127.0.0.1 that is free now (the OS picks it); the caller binds it next."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
