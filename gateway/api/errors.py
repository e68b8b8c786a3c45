"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Everything a client can get wrong or the fleet can fail at is an :class:`ApiError` raised
anywhere on the request path and rendered here; anything else becomes a generic 500 whose
details stay in the server log, never in the response.
"""

from __future__ import annotations

import orjson
from starlette.responses import Response


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def not_found_model(model: str, available: list[str]) -> ApiError:
    return ApiError(404, f"The model `{model}` does not exist. Available models: "
                    f"{', '.join(available) or 'none'}.", param="model", code="model_not_found")


def no_healthy_worker(retry_after_s: int = 2) -> ApiError:
    return ApiError(503, "No healthy worker is available for this model; retry shortly.",
                    type="server_error", code="no_healthy_worker",
                    headers={"retry-after": str(retry_after_s)})


def upstream_failed(detail: str) -> ApiError:
    return ApiError(502, f"The inference worker failed: {detail}", type="server_error",
                    code="upstream_error")


def internal_error() -> ApiError:
    return ApiError(500, "Internal gateway error.", type="server_error", code="internal_error")


def error_response(error: ApiError) -> Response:
    return Response(orjson.dumps(error.body()), status_code=error.status,
                    media_type="application/json", headers=error.headers)


def sse_error_event(error: ApiError) -> bytes:
    """An error reported inside an already started event stream."""
    return b"data: " + orjson.dumps(error.body()) + b"\n\n"
