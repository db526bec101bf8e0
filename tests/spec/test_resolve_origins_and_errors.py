"""spec/resolve.py: the less common paths a mutation run showed unguarded (issue 16,
``reference/mutation.md``): origins of list items, ``explicit()``, the missing-paths line, the first
validation error and its "(got X)" context, one-step-off devices derived from one given count,
and secret masking."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import SecretStr

from verlctl.errors import SpecError
from verlctl.spec.resolve import ResolvedSpec, load_spec, mask_secret
from verlctl.spec.sources import Source


def resolve(**flags: Any) -> ResolvedSpec:
    return load_spec(None, flags=flags, environ={})


def spec_error(**flags: Any) -> SpecError:
    with pytest.raises(SpecError) as exc:
        resolve(**flags)
    return exc.value


def test_an_item_of_a_list_value_has_the_origin_of_the_list() -> None:
    r = resolve(**{"cluster.devices": [0, 1, 2, 3]})
    assert r.origin("cluster.devices").source is Source.FLAG
    assert r.origin("cluster.devices.2").source is Source.FLAG
    assert r.origin("train.steps").source is Source.DEFAULT
    assert r.origin("no.such.path").source is Source.DEFAULT


def test_explicit_is_true_only_for_values_the_user_gave() -> None:
    r = resolve(**{"container.image": "example/verl:1"})
    assert r.explicit("container.image") is True
    assert r.explicit("container.name") is False  # a default
    assert r.explicit("logging.experiment") is False  # derived
    assert load_spec(None, environ={}, typed={"container.name": "mine"}).explicit("container.name") is True


def test_missing_required_paths_name_the_first_and_list_the_others() -> None:
    with pytest.raises(SpecError) as exc:
        resolve().require_complete()
    assert exc.value.field == "paths.model"
    assert str(exc.value).endswith(
        "or pass --set paths.model=DIR or MODEL_PATH (also missing: paths.train_files, paths.val_files)"
    )
    with pytest.raises(SpecError) as one:
        resolve(**{"paths.model": "/m", "paths.train_files": "/t.parquet"}).require_complete()
    assert one.value.field == "paths.val_files"
    assert str(one.value) == (
        "paths.val_files: missing required path: set paths.val_files in the spec file, or pass "
        "--set paths.val_files=FILE or VAL_FILE"
    )  # nothing "also missing"
    resolve(**{"paths.model": "/m", "paths.train_files": "/t", "paths.val_files": "/v"}).require_complete()


def test_the_first_validation_error_is_reported_with_the_rejected_value() -> None:
    err = spec_error(**{"train.steps": -5, "train.lr": -1})  # two errors: steps comes first in the model
    assert err.field == "train.steps"
    assert str(err) == "train.steps: Input should be greater than 0 (got -5) (from flag)"


def test_the_rejected_value_is_not_repeated_when_the_message_has_it() -> None:
    assert str(spec_error(**{"train.steps": 0})) == "train.steps: Input should be greater than 0 (from flag)"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"train.rollout_devices": 2}, (6, "derived", 2, "flag")),
        ({"train.trainer_devices": 3}, (3, "flag", 5, "derived")),
        ({"train.rollout_devices": 8}, (1, "derived", 8, "flag")),  # never 0 trainer devices
        ({"train.trainer_devices": 8}, (8, "flag", 1, "derived")),
        ({}, (4, "derived", 4, "derived")),
    ],
)
def test_one_step_off_derives_the_other_device_count(given: dict[str, int], expected: tuple[Any, ...]) -> None:
    r = resolve(**{"mode": "one_step_off_policy", "cluster.devices": list(range(8)), **given})
    t = r.spec.train
    got = (
        t.trainer_devices,
        r.origin("train.trainer_devices").source.value,
        t.rollout_devices,
        r.origin("train.rollout_devices").source.value,
    )
    assert got == expected


def test_sync_mode_derives_no_device_split() -> None:
    t = resolve(**{"cluster.devices": list(range(8))}).spec.train
    assert (t.trainer_devices, t.rollout_devices) == (None, None)


def test_mask_secret() -> None:
    assert mask_secret(SecretStr("sk-123")) == "**********"
    assert mask_secret(SecretStr("")) == ""
    assert mask_secret(7) == 7


# ---- survivors of the sample on the merged code (resolve after the user-work and fidelity merges)

def _paths() -> dict[str, Any]:
    return {"paths.model": "/mnt/models/Qwen3-8B", "paths.train_files": "/mnt/data/train.parquet",
            "paths.val_files": "/mnt/data/val.parquet"}


def test_recovery_values_are_a_layer_of_their_own() -> None:
    r = load_spec(None, flags=_paths(), environ={}, recovery={"features.enable": ["offload"]})
    assert r.spec.features.enable == ["offload"]
    origin = r.origin("features.enable")
    assert origin.source is Source.RECOVERY and "OOM recovery" in str(origin)


def test_an_error_at_a_secret_path_names_the_field_and_hides_the_value() -> None:
    err = spec_error(**_paths(), **{"logging.swanlab": "SECRETKEY-mut-4411"})
    assert err.field == "logging.swanlab"
    assert "SECRETKEY-mut-4411" not in err.message and "value not shown" in err.message


def test_a_whole_node_split_gives_each_side_every_device_of_its_nodes() -> None:
    r = resolve(**_paths(), mode="one_step_off_policy", **{
        "cluster.nodes": ["10.0.0.1", "10.0.0.2"], "cluster.devices": [0, 1, 2, 3], "train.rollout_nodes": 1,
    })
    assert (r.spec.train.trainer_devices, r.spec.train.rollout_devices) == (4, 4)
    assert r.origin("train.trainer_devices").source is Source.DERIVED
    r = resolve(**_paths(), mode="one_step_off_policy", **{
        "cluster.nodes": ["10.0.0.1", "10.0.0.2"], "cluster.devices": [0, 1, 2, 3], "train.rollout_nodes": 1,
        "train.rollout_devices": 4,
    })
    assert r.spec.train.trainer_devices == 4 and r.origin("train.trainer_devices").source is Source.DERIVED


def test_the_master_is_the_first_listed_node() -> None:
    r = resolve(**_paths(), **{"cluster.nodes": ["10.0.0.7", "10.0.0.8", "10.0.0.9"]})
    assert r.spec.cluster.master_addr == "10.0.0.7"
    assert r.origin("cluster.master_addr").source is Source.DERIVED


def test_swanlab_records_go_below_the_log_directory() -> None:
    r = resolve(**_paths(), **{"paths.logs": "/data/run/logs/"})
    assert r.spec.logging.swanlab.log_dir == "/data/run/logs/swanlog"
