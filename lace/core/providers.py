"""Providers that lace serves itself, offline: no key, no network, no real cost."""

from __future__ import annotations

LOCAL_PROVIDERS = frozenset({"demo", "scripted"})
DEMO_PROVIDER = "demo"
DEMO_MODELS = ("coordinator", "worker")
"""The offline demo's models (`demo/coordinator` plans, `demo/worker` works a task): no other
`demo/...` exists."""
