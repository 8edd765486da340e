"""The exceptions the Rust half raises through ``_native_error``, for every
problem type (the server's slugs, api-types/src/problem.rs) and every
other kind of failure; no server needed."""

from __future__ import annotations

import json
import pickle

import pytest

import dpgate
from dpgate.errors import _native_error, error_for_problem

SLUGS = {
    "budget-exhausted": (dpgate.BudgetExhausted, 409),
    "invalid-input": (dpgate.InvalidInput, 422),
    "unauthorized": (dpgate.Unauthorized, 401),
    "forbidden": (dpgate.Forbidden, 403),
    "features-not-public": (dpgate.FeaturesNotPublic, 403),
    "not-found": (dpgate.NotFound, 404),
    "conflict": (dpgate.Conflict, 409),
    "payload-too-large": (dpgate.PayloadTooLarge, 413),
    "unsupported-media-type": (dpgate.UnsupportedMediaType, 415),
    "method-not-allowed": (dpgate.MethodNotAllowed, 405),
    "timeout": (dpgate.ServerTimeout, 503),
    "internal": (dpgate.InternalError, 500),
    "release-failed": (dpgate.ReleaseFailed, 500),
}


def problem(slug: str, status: int, **extra: object) -> dict[str, object]:
    return {
        "type": f"/problems/{slug}",
        "title": f"title of {slug}",
        "status": status,
        "detail": f"detail of {slug}",
        "request_id": f"request-{slug}",
        **extra,
    }


@pytest.mark.parametrize("slug", sorted(SLUGS))
def test_every_problem_type_has_its_exception(slug: str) -> None:
    cls, status = SLUGS[slug]
    document = problem(slug, status, remaining={"epsilon": 0.5, "delta": 1e-7})
    error = _native_error("problem", "", json.dumps(document), None)
    assert type(error) is cls
    assert isinstance(error, dpgate.DpgateError)
    assert error.type == f"/problems/{slug}"
    assert error.title == f"title of {slug}"
    assert error.status == status
    assert error.detail == f"detail of {slug}"
    assert error.request_id == f"request-{slug}"
    assert error.problem == document
    assert f"detail of {slug}" in str(error) and f"request-{slug}" in str(error)


def test_a_native_message_is_kept() -> None:
    error = _native_error(
        "problem", "as the Rust side put it", json.dumps(problem("conflict", 409)), None
    )
    assert str(error).startswith("as the Rust side put it")


def test_an_unknown_problem_type_is_a_plain_dpgate_error() -> None:
    error = error_for_problem(problem("something-new", 418))
    assert type(error) is dpgate.DpgateError
    assert error.status == 418 and error.detail == "detail of something-new"


def test_every_problem_type_is_a_distinct_public_class() -> None:
    classes = [cls for cls, _ in SLUGS.values()]
    assert len(set(classes)) == len(classes)
    for cls in classes:
        assert getattr(dpgate, cls.__name__) is cls


@pytest.mark.parametrize(
    ("kind", "status", "cls"),
    [
        ("transport", None, dpgate.TransportError),
        ("unexpected", 502, dpgate.UnexpectedResponse),
        ("invalid", None, dpgate.InvalidArgument),
        ("failed", None, dpgate.DpgateError),
        ("a-kind-from-a-newer-rust-half", None, dpgate.DpgateError),
    ],
)
def test_failures_without_a_problem(kind: str, status: int | None, cls: type[Exception]) -> None:
    error = _native_error(kind, "what happened", None, status)
    assert type(error) is cls
    assert str(error) == "what happened"
    assert error.status == status  # type: ignore[attr-defined]
    assert error.problem == {} and error.type is None and error.request_id is None  # type: ignore[attr-defined]


def test_a_bad_argument_is_also_a_value_error() -> None:
    assert isinstance(_native_error("invalid", "bad id", None, None), ValueError)


def test_an_unreadable_problem_document_is_an_unexpected_response() -> None:
    error = _native_error("problem", "", "not json", 500)
    assert type(error) is dpgate.UnexpectedResponse and error.status == 500


def test_errors_pickle_with_their_problem() -> None:
    error = error_for_problem(
        problem("budget-exhausted", 409, remaining={"epsilon": 0.0, "delta": 0.0})
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is dpgate.BudgetExhausted
    assert copy.problem == error.problem and str(copy) == str(error)
