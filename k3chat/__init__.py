"""k3chat: a terminal chat and agent application over the embedded K3 engine.

Importing this package must stay cheap (no torch, no textual): `k3chat --help` depends on it.
"""

__version__ = "0.1.0"
