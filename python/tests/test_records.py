"""Records (the API's JSON as attributes), request JSON, and the client's
copy and pickle rules; no server needed."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import dpgate
from dpgate.records import BoundedColumn, Budget, Dataset, Record, Release, dumps

DATASET = {
    "id": "0b0e7f52-52a5-4f8c-9a0c-1f7a8e6b2d11",
    "name": "ads",
    "n_rows": 3,
    "privacy_unit": "label",
    "accountant": "rdp",
    "features": [{"name": "f0", "min": 0.0, "max": 1.0}],
    "label": "converted",
    "measures": [],
    "dimensions": [{"name": "campaign", "values": ["a", "b"]}],
    "budget": {"epsilon": 10.0, "delta": 1e-6},
    "spent": {"epsilon": 0.0, "delta": 0.0, "epsilon_basic": 0.0, "delta_basic": 0.0},
    "remaining": {"epsilon": 10.0, "delta": 1e-6},
    "created_at": "2026-01-01T00:00:00Z",
    "a_field_added_later": {"nested": [{"x": 1}]},
}


def test_fields_are_attributes_with_their_types() -> None:
    dataset = Dataset(DATASET)
    assert dataset.id == DATASET["id"] and dataset.n_rows == 3
    assert isinstance(dataset.budget, Budget) and dataset.budget.epsilon == 10.0
    assert isinstance(dataset.features[0], BoundedColumn) and dataset.features[0].max == 1.0
    # A field named like a dict method is still the field.
    assert dataset.dimensions[0].values == ["a", "b"]
    assert dataset["label"] == "converted"
    assert "label" in dataset and "analysts" not in dataset


def test_optional_and_unknown_fields() -> None:
    dataset = Dataset(DATASET)
    assert dataset.analysts is None  # declared, left out of this answer
    later = dataset.a_field_added_later  # not declared: read all the same
    assert isinstance(later, Record) and later.nested[0].x == 1
    with pytest.raises(AttributeError):
        dataset.no_such_field  # noqa: B018
    with pytest.raises(KeyError):
        dataset["no_such_field"]


def test_records_are_read_only_and_equal_by_their_json() -> None:
    dataset = Dataset(DATASET)
    with pytest.raises(AttributeError):
        dataset.name = "other"  # type: ignore[misc]
    assert Dataset(DATASET) == dataset
    assert dataset.to_dict() == DATASET
    changed = dataset.to_dict()
    changed["name"] = "other"
    assert Dataset(changed) != dataset and dataset.name == "ads"
    assert "name" in dir(dataset)


def test_a_replay_equals_the_original() -> None:
    data = {"id": "r", "kind": "walr", "result": {"noisy_dot": [0.1]}}
    original, replay = Release(data), Release(data, replayed=True)
    assert replay == original and replay.replayed and not original.replayed
    assert replay.result.noisy_dot == [0.1]


def test_records_pickle_and_deep_copy() -> None:
    release = Release({"id": "r", "kind": "walr"}, replayed=True)
    for copied in (pickle.loads(pickle.dumps(release)), copy.deepcopy(release)):
        assert copied == release and copied.replayed
        assert type(copied) is Release


def test_request_json_takes_numpy() -> None:
    text = dumps({"theta": np.array([0.5, 1.0]), "calls": np.int64(3), "x": np.float32(0.25)})
    assert text == '{"theta": [0.5, 1.0], "calls": 3, "x": 0.25}'
    with pytest.raises(ValueError):
        dumps({"epsilon": float("nan")})


def test_a_client_is_shared_by_copies_and_pickles_without_its_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = dpgate.Client("http://127.0.0.1:9", "secret-token")
    assert "secret-token" not in repr(client)
    assert copy.deepcopy(client) is client and copy.copy(client) is client
    monkeypatch.setenv("DPGATE_TOKEN", "the-environment's")
    pickled = pickle.dumps(client)
    assert b"secret-token" not in pickled
    assert pickle.loads(pickled).url == client.url


def test_the_client_defaults_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DPGATE_URL", raising=False)
    assert dpgate.Client().url.rstrip("/") == dpgate.DEFAULT_URL
    monkeypatch.setenv("DPGATE_URL", "http://127.0.0.1:9")
    assert dpgate.Client().url.rstrip("/") == "http://127.0.0.1:9"
