"""Errors on the wire, in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from typing import Any

from ..chat_template import ChatTemplateError
from ..errors import ContextFullError, EdgespecError, InvalidParameterError, RpcWorkerLost

LOST_RETRY_AFTER_S = 5  # a client's wait after a lost worker (a supervised server reloads)


class ApiError(Exception):
    """An HTTP error response: status code and OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}  # extra response headers (Retry-After)
        self.status = status
        self.message = message
        self.type = kind
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body OpenAI clients parse."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    """A 400 invalid_request_error."""
    return ApiError(400, message, param=param, code=code)


def from_exception(exc: BaseException, param: str | None = None) -> ApiError:
    """The API error for an exception raised while serving a request.

    edgespec's own parameter and context errors are the client's (400); anything
    else is a 500 server_error whose message names only the exception type.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ContextFullError):
        return ApiError(400, str(exc), param=param, code="context_length_exceeded")
    if isinstance(exc, ChatTemplateError):
        return ApiError(400, str(exc), param="messages", code="chat_template_error")
    if isinstance(exc, InvalidParameterError):
        return ApiError(400, str(exc), param=param, code="invalid_value")
    if isinstance(exc, RpcWorkerLost):  # the server is up, the target is not
        return ApiError(
            503,
            str(exc),
            kind="server_error",
            code="rpc_worker_lost",
            headers={"Retry-After": str(LOST_RETRY_AFTER_S)},
        )
    if isinstance(exc, EdgespecError):
        return ApiError(500, str(exc), kind="server_error", code="engine_error")
    return ApiError(
        500, f"internal error ({type(exc).__name__})", kind="server_error", code="internal_error"
    )
