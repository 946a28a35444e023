"""Providers that lace serves itself, offline: no key, no network, no real cost."""

from __future__ import annotations

LOCAL_PROVIDERS = frozenset({"demo", "scripted"})
