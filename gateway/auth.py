"""API keys → tenants, kept hashed and compared in constant time.

Keys come from a file (``--api-keys FILE``: one ``tenant:key`` per line, ``#`` comments) or
the environment (``RADIXGATE_API_KEYS="tenant-a:key1,tenant-b:key2"``). Only SHA-256
digests are held in memory. A presented key is checked against *every* entry with
``hmac.compare_digest``, so the time taken says nothing about which entry, if any, came
close. With no keys configured the gateway is open and every request is tenant
``default``. The admin key (``--admin-key``) guards ``/admin/*``; when client keys are set
but no admin key is, the admin endpoints are closed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TENANT = "default"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


@dataclass(frozen=True)
class KeyRing:
    entries: tuple[tuple[bytes, str], ...] = ()
    admin: bytes | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.entries)

    @classmethod
    def load(cls, keys_file: str | None = None, admin_key: str | None = None,
             env: str | None = None) -> KeyRing:
        lines: list[str] = []
        if keys_file:
            lines += Path(keys_file).read_text().splitlines()
        env = os.environ.get("RADIXGATE_API_KEYS", "") if env is None else env
        lines += env.split(",")
        entries = []
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            tenant, sep, key = line.partition(":")
            if not sep or not tenant.strip() or not key.strip():
                raise ValueError("API keys are 'tenant:key' entries")
            entries.append((_digest(key.strip()), tenant.strip()))
        return cls(tuple(entries), _digest(admin_key) if admin_key else None)

    def tenant_for(self, presented: str | None) -> str | None:
        """The tenant owning ``presented``; ``None`` for a missing or unknown key."""
        if not self.enabled:
            return DEFAULT_TENANT
        if not presented:
            return None
        digest = _digest(presented)
        found = None
        for entry, tenant in self.entries:  # no early exit: same work whatever matches
            if hmac.compare_digest(entry, digest):
                found = tenant
        return found

    def is_admin(self, presented: str | None) -> bool:
        if self.admin is None:
            return not self.enabled
        return presented is not None and hmac.compare_digest(self.admin, _digest(presented))


def presented_key(headers: dict[bytes, bytes]) -> str | None:
    """``Authorization: Bearer KEY`` (OpenAI) or ``x-api-key: KEY`` (Anthropic)."""
    auth = headers.get(b"authorization", b"").decode("latin-1")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    key = headers.get(b"x-api-key", b"").decode("latin-1").strip()
    return key or None
