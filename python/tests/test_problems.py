"""Every problem a client can provoke from a real server comes back as its
exception, with the problem document's fields set."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import MAX_BODY_BYTES, Labelled, Server, schema

import dpgate
from dpgate.errors import error_for_problem


def raised(cls: type[dpgate.DpgateError], slug: str, call: Callable[[], Any]) -> dpgate.DpgateError:
    """The error ``call`` raises, checked to be ``cls`` with the problem
    document's fields."""
    with pytest.raises(cls) as caught:
        call()
    error = caught.value
    assert type(error) is cls
    assert error.type is not None and error.type.endswith(f"/problems/{slug}")
    assert error.detail and error.title and error.status
    assert error.request_id, "every problem names its request"
    assert error.problem["type"] == error.type
    return error


def test_a_bad_token_is_unauthorized(server: Server) -> None:
    client = dpgate.Client(server.url, "not-a-token")
    error = raised(dpgate.Unauthorized, "unauthorized", client.datasets)
    assert error.status == 401


def test_an_analyst_on_an_admin_route_is_forbidden(server: Server, labelled: Labelled) -> None:
    error = raised(
        dpgate.Forbidden,
        "forbidden",
        lambda: labelled.analyst.create_dataset(**schema(f"py-{uuid.uuid4().hex}")),
    )
    assert error.status == 403


def test_an_unknown_dataset_is_not_found(server: Server) -> None:
    raised(dpgate.NotFound, "not-found", lambda: server.admin().dataset(str(uuid.uuid4())))


def test_bad_parameters_are_invalid_input(labelled: Labelled) -> None:
    before = labelled.analyst.dataset(labelled.dataset).spent
    error = raised(
        dpgate.InvalidInput,
        "invalid-input",
        lambda: labelled.analyst.aggregate(
            labelled.dataset, ["sum:no_such_column"], epsilon=1.0, delta=1e-6
        ),
    )
    assert "no_such_column" in (error.detail or "")
    assert labelled.analyst.dataset(labelled.dataset).spent == before


def test_a_release_beyond_the_budget_is_budget_exhausted(server: Server) -> None:
    dataset = server.dataset(epsilon=1.0, rows=100)
    analyst = server.analyst("poor", [dataset.id])
    error = raised(
        dpgate.BudgetExhausted,
        "budget-exhausted",
        lambda: analyst.release(dataset, "aggregate", 2.0, 1e-6, statistics=["mean:converted"]),
    )
    assert error.status == 409
    assert error.problem["remaining"]["epsilon"] == pytest.approx(1.0)


def test_a_taken_name_is_a_conflict(server: Server, labelled: Labelled) -> None:
    raised(
        dpgate.Conflict,
        "conflict",
        lambda: server.admin().create_dataset(**schema(labelled.dataset.name)),
    )


def test_an_idempotency_key_reused_for_another_body_is_a_conflict(labelled: Labelled) -> None:
    key = f"py-{uuid.uuid4()}"
    labelled.analyst.release(
        labelled.dataset, "aggregate", 0.1, 1e-6, statistics=["mean:converted"], idempotency_key=key
    )
    raised(
        dpgate.Conflict,
        "conflict",
        lambda: labelled.analyst.release(
            labelled.dataset,
            "aggregate",
            0.2,
            1e-6,
            statistics=["mean:converted"],
            idempotency_key=key,
        ),
    )


def test_the_features_of_a_row_unit_dataset_are_not_public(server: Server) -> None:
    dataset = server.dataset(privacy_unit="row", rows=10)
    analyst = server.analyst("row-reader", [dataset.id])
    raised(dpgate.FeaturesNotPublic, "features-not-public", lambda: analyst.features(dataset))


def test_a_body_over_the_limit_is_payload_too_large(server: Server) -> None:
    values = [f"value-{index:08d}" for index in range(MAX_BODY_BYTES // 10)]
    request = schema(f"py-{uuid.uuid4().hex}")
    request["dimensions"] = [{"name": "campaign", "values": values}]
    raised(
        dpgate.PayloadTooLarge,
        "payload-too-large",
        lambda: server.admin().create_dataset(**request),
    )


def raw(
    server: Server, method: str, path: str, body: bytes | None, content_type: str | None
) -> dpgate.DpgateError:
    """The error of a raw request: the Rust client never sends a wrong
    media type or method, so these problems are provoked by hand and read
    with the package's own mapping."""
    request = urllib.request.Request(f"{server.url}{path}", data=body, method=method)
    request.add_header("Authorization", f"Bearer {server.admin_token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.headers.get_content_type() == "application/problem+json"
    return error_for_problem(json.loads(caught.value.read()))


def test_a_wrong_media_type_is_unsupported(server: Server) -> None:
    error = raw(server, "POST", "/v1/datasets", b"name=x", "text/plain")
    assert type(error) is dpgate.UnsupportedMediaType and error.status == 415
    assert error.request_id and error.detail


def test_a_wrong_method_is_not_allowed(server: Server) -> None:
    error = raw(server, "DELETE", "/v1/datasets", None, None)
    assert type(error) is dpgate.MethodNotAllowed and error.status == 405
    assert error.request_id and error.detail


def test_a_server_that_is_not_there_is_a_transport_error() -> None:
    from conftest import free_port

    client = dpgate.Client(f"http://127.0.0.1:{free_port()}", connect_timeout=1.0, timeout=2.0)
    with pytest.raises(dpgate.TransportError):
        client.health()


def test_a_malformed_id_is_refused_before_sending(server: Server) -> None:
    with pytest.raises(dpgate.InvalidArgument) as caught:
        server.admin().dataset("not-a-uuid")
    assert isinstance(caught.value, ValueError)
