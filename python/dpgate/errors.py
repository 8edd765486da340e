"""The exceptions of the package.

A server's problem document (RFC 9457) becomes the subclass of
:class:`DpgateError` named after its type's slug (``/problems/<slug>``), so
callers catch what they can handle (``except dpgate.BudgetExhausted``) and
read the whole document from ``.problem``. A problem of a type this
package does not know is a plain :class:`DpgateError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BudgetExhausted",
    "Conflict",
    "DpgateError",
    "FeaturesNotPublic",
    "Forbidden",
    "InternalError",
    "InvalidArgument",
    "InvalidInput",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "ReleaseFailed",
    "ServerTimeout",
    "TransportError",
    "Unauthorized",
    "UnexpectedResponse",
    "UnsupportedMediaType",
    "error_for_problem",
]


class DpgateError(Exception):
    """Any failure of a dpgate call.

    Attributes mirror the problem document's fields when the server sent
    one, and are ``None`` (``problem`` empty) otherwise.

    Attributes:
        problem: The whole problem document, e.g. ``remaining`` on
            ``budget-exhausted``, ``errors`` (bad lines) on a rejected
            upload, ``release_id`` on ``release-failed``.
        type: The problem's type URI, ``/problems/<slug>``.
        title: The type's short human title.
        status: The HTTP status.
        detail: What went wrong with this request.
        request_id: The request's ``x-request-id``, which every server log
            line of the request carries: quote it to the operator.
    """

    problem: dict[str, Any]
    type: str | None
    title: str | None
    status: int | None
    detail: str | None
    request_id: str | None

    def __init__(
        self,
        message: str,
        problem: Mapping[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.problem = dict(problem or {})
        self.type = self.problem.get("type")
        self.title = self.problem.get("title")
        self.status = self.problem.get("status", status)
        self.detail = self.problem.get("detail")
        self.request_id = self.problem.get("request_id")

    def __reduce__(self) -> tuple[Any, ...]:
        # The constructor's arguments, so a pickled error (across processes,
        # say) keeps its problem document.
        return (type(self), (str(self), self.problem, self.status))


class BudgetExhausted(DpgateError):
    """409 ``budget-exhausted``: the release does not fit the remaining
    budget; ``problem["remaining"]`` says what the dataset (or the caller's
    cap) has left."""


class InvalidInput(DpgateError):
    """422 (400 for unparseable bodies) ``invalid-input``: the request is
    malformed; nothing was spent."""


class Unauthorized(DpgateError):
    """401 ``unauthorized``: no token, or one that is invalid, expired or
    revoked."""


class Forbidden(DpgateError):
    """403 ``forbidden``: a valid token without the role or dataset grant
    the call needs."""


class FeaturesNotPublic(DpgateError):
    """403 ``features-not-public``: the features of a dataset whose privacy
    unit is ``row`` are private, so they are never exported."""


class NotFound(DpgateError):
    """404 ``not-found``: no such route, dataset or release (for this
    caller)."""


class Conflict(DpgateError):
    """409 ``conflict``: the request conflicts with stored state (a taken
    name, an idempotency key used for another request, …)."""


class PayloadTooLarge(DpgateError):
    """413 ``payload-too-large``: the body exceeds the server's limit."""


class UnsupportedMediaType(DpgateError):
    """415 ``unsupported-media-type``: the body's media type is not
    accepted on this route."""


class MethodNotAllowed(DpgateError):
    """405 ``method-not-allowed``: the route exists but not for this
    method."""


class ServerTimeout(DpgateError):
    """503 ``timeout``: the request took longer than the server allows. A
    release already debited is still made: retry with the same
    idempotency key to get it. (Named so as not to be taken for Python's
    own ``TimeoutError``.)"""


class InternalError(DpgateError):
    """500 ``internal``: a fault on the server; the detail is in its log
    (find it by ``request_id``)."""


class ReleaseFailed(DpgateError):
    """500 ``release-failed``: the release was debited but could not be
    made. Its ledger entry (``problem["release_id"]``) stays; a retry with
    the same idempotency key gets the same answer, never fresh noise."""


class TransportError(DpgateError):
    """The request did not complete (no connection, a timeout of the
    client's own, a dropped answer) after the client's retries."""


class UnexpectedResponse(DpgateError):
    """The server answered something this client does not understand;
    ``status`` is its HTTP status."""


class InvalidArgument(DpgateError, ValueError):
    """A call refused before anything was sent: a malformed id, JSON or
    argument. Also a :class:`ValueError`."""


_BY_SLUG: dict[str, type[DpgateError]] = {
    "budget-exhausted": BudgetExhausted,
    "invalid-input": InvalidInput,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "features-not-public": FeaturesNotPublic,
    "not-found": NotFound,
    "conflict": Conflict,
    "payload-too-large": PayloadTooLarge,
    "unsupported-media-type": UnsupportedMediaType,
    "method-not-allowed": MethodNotAllowed,
    "timeout": ServerTimeout,
    "internal": InternalError,
    "release-failed": ReleaseFailed,
}


def error_for_problem(problem: Mapping[str, Any], message: str | None = None) -> DpgateError:
    """The exception for a problem document: the class of its type's slug
    (a plain :class:`DpgateError` for a type this package does not know).

    ``message`` (when not given or empty) is the CLI's wording, ``title
    (status): detail``; the request id is appended, since it is what an
    operator asks for.
    """
    slug = str(problem.get("type", "")).rsplit("/", 1)[-1]
    if not message:
        message = f"{problem.get('title')} ({problem.get('status')}): {problem.get('detail')}"
    request_id = problem.get("request_id")
    if request_id:
        message = f"{message} [request {request_id}]"
    return _BY_SLUG.get(slug, DpgateError)(message, problem)


def _native_error(
    kind: str, message: str, problem: str | None, status: int | None
) -> BaseException:
    """The exception a failed call of :mod:`dpgate._native` raises (the
    Rust half calls this; see its module docstring for ``kind``)."""
    if kind == "problem" and problem is not None:
        try:
            document = json.loads(problem)
        except ValueError:
            return UnexpectedResponse(f"{message} (an unreadable problem document)", status=status)
        return error_for_problem(document, message)
    if kind == "transport":
        return TransportError(message, status=status)
    if kind == "unexpected":
        return UnexpectedResponse(message, status=status)
    if kind == "invalid":
        return InvalidArgument(message)
    # "failed", and any kind a newer Rust half may add.
    return DpgateError(message, status=status)
