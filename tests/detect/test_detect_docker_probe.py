"""The docker probe against the real local engine: images imported from a one-file tar and containers
created (not started) for the test, removed by id afterwards."""

from __future__ import annotations

import io
import os
import socket
import tarfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from verlctl.detect.docker_probe import DockerInfo, probe_docker

pytestmark = pytest.mark.docker


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env(timeout=20)
        client.ping()
    except Exception as exc:
        if _in_ci():
            pytest.fail(f"CI needs a docker engine: {exc}")
        pytest.skip(f"no docker engine: {exc}")
    yield client
    client.close()


def _tiny_image_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        data = b"verlctl detect test image\n"
        ti = tarfile.TarInfo("README")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def objects(engine: Any) -> Iterator[dict[str, str]]:
    tag = uuid.uuid4().hex[:10]
    labels = {"verlctl-test": "1", "verlctl-test.owner": f"{socket.gethostname()}:{os.getpid()}"}
    names = {
        "match_image": f"ascend-probe-{tag}:8.3.rc1",
        "plain_image": f"probe-plain-img-{tag}:1",
        "match_container": f"verl-probe-{tag}",
        "plain_container": f"probe-plain-{tag}",
    }
    image_ids: list[str] = []
    container_ids: list[str] = []
    try:
        for key in ("match_image", "plain_image"):
            repo, version = names[key].split(":")
            engine.api.import_image_from_data(_tiny_image_tar(), repository=repo, tag=version)
            image_ids.append(engine.images.get(names[key]).id)
        for key, image in (("match_container", "plain_image"), ("plain_container", "plain_image")):
            c = engine.api.create_container(names[image], command=["/README"], name=names[key], labels=labels)
            container_ids.append(c["Id"])
        # the verl container is created from the plain image: it must match by its own name
        yield names
    finally:
        for cid in container_ids:
            engine.api.remove_container(cid, force=True)
        for iid in image_ids:
            engine.api.remove_image(iid, force=True)


def test_filtered_listing(objects: dict[str, str], engine: Any) -> None:
    info = probe_docker(timeout=20)
    assert isinstance(info, DockerInfo)
    assert info.filtered and info.patterns == ["verl", "ascend"]
    assert info.api_version == engine.version()["ApiVersion"]  # negotiated, not pinned
    c = info.container(objects["match_container"])
    assert c is not None and c.state == "created" and c.image == objects["plain_image"] and not c.running
    assert info.container(objects["plain_container"]) is None
    tags = [t for im in info.images for t in im.tags]
    assert objects["match_image"] in tags and objects["plain_image"] not in tags
    assert info.total_containers >= 2 and info.total_images >= 2


def test_all_listing(objects: dict[str, str]) -> None:
    info = probe_docker(all_items=True, timeout=20)
    assert isinstance(info, DockerInfo) and not info.filtered
    assert info.container(objects["plain_container"]) is not None
    tags = [t for im in info.images for t in im.tags]
    assert objects["plain_image"] in tags and objects["match_image"] in tags
    assert len(info.containers) == info.total_containers


def test_custom_patterns(objects: dict[str, str]) -> None:
    # a pattern matches a container by its name or by its image reference, an image by its tags
    only = probe_docker(patterns=[objects["match_container"]], timeout=20)
    assert isinstance(only, DockerInfo)
    assert [c.name for c in only.containers] == [objects["match_container"]] and only.images == []
    by_image = probe_docker(patterns=[objects["plain_image"].split(":")[0]], timeout=20)
    assert isinstance(by_image, DockerInfo)
    assert sorted(c.name for c in by_image.containers) == sorted(
        [objects["match_container"], objects["plain_container"]]
    )
    assert [im.tags for im in by_image.images] == [[objects["plain_image"]]]
