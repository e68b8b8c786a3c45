"""Authenticate API calls and name their tenant; guard the admin endpoints.

Errors come in the shape of the API that was called: Anthropic's for ``/v1/messages``,
OpenAI's for the rest. Health, readiness and metrics stay open (probes and scrapers).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.api.anthropic import error_response as anthropic_error
from gateway.api.anthropic import from_api_error
from gateway.api.errors import ApiError, error_response
from gateway.auth import KeyRing, presented_key

OPEN_PATHS = ("/health", "/ready", "/metrics")


class AuthMiddleware:
    def __init__(self, app: ASGIApp, keys: KeyRing) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        key = presented_key(dict(scope["headers"]))
        state = scope.setdefault("state", {})
        if path.startswith("/admin"):
            if not self.keys.is_admin(key):
                await self._deny(scope, receive, send, 403 if key else 401,
                                 "The admin key is missing or wrong.")
                return
            state["tenant"] = "admin"
        else:
            tenant = self.keys.tenant_for(key)
            if tenant is None:
                await self._deny(scope, receive, send, 401,
                                 "Missing or invalid API key." if not key else
                                 "Incorrect API key provided.")
                return
            state["tenant"] = tenant
        await self.app(scope, receive, send)

    @staticmethod
    async def _deny(scope: Scope, receive: Receive, send: Send, status: int,
                    message: str) -> None:
        kind = "authentication_error" if status == 401 else "permission_error"
        error = ApiError(status, message, type=kind, code="invalid_api_key")
        if scope.get("path", "").startswith("/v1/messages"):
            response = anthropic_error(from_api_error(error))
        else:
            response = error_response(error)
        await response(scope, receive, send)
