"""The image of a new container defaults to the seeds' verl image (DEFAULT_IMAGE), listed first in the wizard's
image question: never the local tag that sorts first (a base image without verl, a CI build stage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verlctl.spec.model import DEFAULT_IMAGE
from verlctl.spec.sources import Source
from verlctl.wizard import machine_view as mv
from wizard_support import OTHER_IMAGE, RUN, drive, make_world

#: Local tags that sort before the seeds' image: none of them may become the default.
LOCAL = ["aaa/base:1", "verlctl-test-base:2be3992def82b0d9", "verlctl-realverl-pip:a5fec844b991636a", OTHER_IMAGE]


def with_images(machine: Any, tags: list[str]) -> Any:
    from verlctl.detect.docker_probe import ImageInfo

    images = [ImageInfo(id=f"{i:012d}", tags=[t]) for i, t in enumerate(tags)]
    return machine.model_copy(update={"docker": machine.docker.model_copy(update={"images": images})})


def test_no_local_tag_is_pre_filled_as_the_image(tmp_path: Path) -> None:
    machine = with_images(make_world(tmp_path).machine, LOCAL)
    assert "container.image" not in mv.prefill(machine)


def test_accepting_the_image_question_pulls_the_seeds_image(tmp_path: Path) -> None:
    d = drive(RUN + "\r" * 20, with_images(make_world(tmp_path).machine, LOCAL))
    spec = d.resolved.spec
    assert spec.container.image == DEFAULT_IMAGE and spec.container.pull is True
    assert d.resolved.origin("container.image").source is Source.DEFAULT


def test_a_local_seeds_image_is_the_default_without_a_pull(tmp_path: Path) -> None:
    d = drive(RUN + "\r" * 20, with_images(make_world(tmp_path).machine, [*LOCAL, DEFAULT_IMAGE]))
    spec = d.resolved.spec
    assert spec.container.image == DEFAULT_IMAGE and spec.container.pull is False
    assert d.resolved.origin("container.pull").source is Source.DEFAULT
