"""Client hints: session affinity, cache salts and tenant isolation, and what the engine gets.

* Affinity key, first found of: ``prompt_cache_key``, the ``x-session-id`` header, ``user``
  (Anthropic: ``metadata.user_id``). Scoped by tenant, so tenants never share sessions.
* Salt: the client's ``cache_salt`` (vLLM's per-request prefix-cache isolation), and with
  ``--cache-isolation tenant`` a per-tenant salt folded into it. The same salt goes to the
  engine (``cache_salt``) and into the gateway's own block keys, so no tenant can hit,
  or learn about, another tenant's cached prefix.
* The engine receives the body without gateway-only fields (``prompt_cache_key``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from gateway.api.errors import bad_request

GATEWAY_ONLY = ("prompt_cache_key", "prompt_cache_retention")
_SALT_FORBIDDEN = set("@/\\\x00")


@dataclass(frozen=True, slots=True)
class Hints:
    tenant: str
    affinity_key: str | None = None
    salt: str | None = None


def _salt(client_salt: Any, tenant: str, isolation: str) -> str | None:
    if client_salt is not None and not (
            isinstance(client_salt, str) and 0 < len(client_salt) <= 128
            and not _SALT_FORBIDDEN & set(client_salt)):
        raise bad_request("'cache_salt' must be 1 to 128 characters without '@', '/', '\\' "
                          "or NUL.", "cache_salt", "invalid_value")
    if isolation != "tenant":
        return client_salt
    digest = hashlib.sha256(f"{tenant}\x00{client_salt or ''}".encode()).hexdigest()
    return "t" + digest[:40]


def _key(value: Any, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= 1024:
        raise bad_request(f"'{param}' must be a string of 1 to 1024 characters.", param,
                          "invalid_value")
    return value


def request_hints(body: dict[str, Any], session_header: str | None, tenant: str,
                  isolation: str, user: Any = None) -> Hints:
    """Hints of an OpenAI-style body (``user`` overrides ``body["user"]``: Anthropic)."""
    key = (_key(body.get("prompt_cache_key"), "prompt_cache_key")
           or _key(session_header, "x-session-id")
           or _key(user if user is not None else body.get("user"), "user"))
    return Hints(tenant, f"{tenant}\x00{key}" if key else None,
                 _salt(body.get("cache_salt"), tenant, isolation))


def engine_body(body: dict[str, Any], hints: Hints) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in GATEWAY_ONLY}
    if hints.salt is not None:
        out["cache_salt"] = hints.salt
    return out


def needs_rewrite(body: dict[str, Any], hints: Hints) -> bool:
    return any(k in body for k in GATEWAY_ONLY) or body.get("cache_salt") != hints.salt
