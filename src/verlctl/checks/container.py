"""``container.*``: the Docker engine answers, the image is local (or pulled), the existing container's state and
mounts; the recipe entry file in the work dir."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.detect.check_probes import DockerFacts
from verlctl.spec.model import RunSpec


def check_docker(spec: RunSpec, docker: DockerFacts | None, image_explicit: bool = False) -> list[Finding]:
    """The engine answers; the image is local (or pulling is configured); the container's state and mounts."""
    c = spec.container
    if c.runtime != "docker" or docker is None:
        return []
    if docker.error is not None:
        return [
            error(
                "docker_engine",
                f"container.runtime is docker but {docker.error}",
                "container.runtime",
                "start dockerd (or set DOCKER_HOST), or use container.runtime: host",
            )
        ]
    if docker.exists:
        return _existing_container(spec, docker, image_explicit)
    out = [
        info(
            "container_absent",
            f"container {c.name} does not exist: launch creates it from {c.image}",
            "container.name",
        )
    ]
    return out + _image(spec, docker)


def _image(spec: RunSpec, docker: DockerFacts) -> list[Finding]:
    c = spec.container
    if docker.image_present is None or docker.image_present:
        return []
    if c.pull:
        return [info("image_pull", f"image {c.image} is not present locally: launch pulls it (container.pull)", "container.image")]
    return [
        error(
            "image_missing",
            f"image {c.image} is not present locally and pulling is not configured",
            "container.image",
            f"`docker pull {c.image}`, set container.pull: true (or launch --pull), or choose a local image",
        )
    ]


def _existing_container(spec: RunSpec, docker: DockerFacts, image_explicit: bool) -> list[Finding]:
    c = spec.container
    out = [
        info(
            "container_state",
            f"container {c.name} exists ({docker.state}, image {docker.container_image}): launch reuses it"
            + ("" if docker.running else " and starts it"),
            "container.name",
        )
    ]
    if docker.image_note:
        make = error if image_explicit else warning
        out.append(
            make(
                "container_image",
                docker.image_note,
                "container.image",
                "choose another container.name to get a new container of the spec's image",
            )
        )
    for field, path in docker.missing_mounts:
        out.append(
            error(
                "container_mount_missing",
                f"container {c.name} does not mount {path}, so training in it cannot see {field}",
                field,
                "mounts cannot be added to an existing container: use another container.name (a new container gets "
                "every mount), or recreate it with the mount",
            )
        )
    return out


def check_recipe(spec: RunSpec, missing: str | None) -> list[Finding]:
    from verlctl.verl.entrypoints import RECIPE_HINT

    if missing is None:
        return []
    return [error("recipe_missing", f"no {missing} in the work dir {spec.container.workdir}", "container.workdir",
                  RECIPE_HINT)]
