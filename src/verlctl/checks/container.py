"""``container.*``: the Docker engine answers, the image is local (or pulled), the existing container's state and
mounts; the recipe entry file in the work dir."""

from __future__ import annotations

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.detect.check_probes import DockerFacts, ImageVersions, TargetLookup
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


def check_image_versions(verl_version: str, versions: ImageVersions | None, field: str = "container.image",
                         node: str = "") -> list[Finding]:  # fmt: skip
    """The Python and Ray where training runs satisfy what the targeted verl declares (its wheel's
    ``Requires-Python`` and ``ray[default]`` requirement, :mod:`verlctl.verl.requirements`): verl's imports and
    its Ray API calls fail otherwise, after the cluster is up. ``node``: the node's words in a multi-node
    pre-flight ("node 10.0.0.2: ")."""
    from verlctl.verl.requirements import REQUIREMENTS, python_ok, ray_ok

    req = REQUIREMENTS.get(verl_version)
    if versions is None or req is None:
        return []
    where = versions.where
    out: list[Finding] = []
    if versions.python and python_ok(req, versions.python) is False:
        out.append(error(
            "image_python_unsupported",
            f"{node}Python {versions.python} in {where}: verl {verl_version} requires Python {req.python_text}",
            field,
            f"use an image whose python3 is {req.python_text} (verl {verl_version}'s Requires-Python), or target "
            "the verl version the image was built for (verl_version)",
        ))
    if versions.python and versions.ray is None:
        out.append(error(
            "image_ray_missing",
            f"{node}no Ray is installed for python3 in {where}: verl {verl_version} runs on Ray "
            f"(ray[default]{req.ray_text}) and start_verl.sh starts it",
            field,
            f"install it in the image (pip install 'ray[default]{req.ray_text}'), or choose an image with verl's "
            "dependencies",
        ))
    elif versions.ray and ray_ok(req, versions.ray) is False:
        out.append(error(
            "image_ray_too_old",
            f"{node}Ray {versions.ray} in {where}: verl {verl_version} requires ray[default]{req.ray_text}",
            field,
            f"upgrade Ray in the image (pip install 'ray[default]{req.ray_text}'), the same version on every node",
        ))
    return out


def target_lookup_findings(spec: RunSpec, look: TargetLookup | None) -> list[Finding]:
    """The in-target look-up as findings (``check``, ``launch --dry-run`` and ``launch`` alike): a module an
    override needs and the target lacks, an entry point that does not import, an override list that does not
    compose there or that verl's validate_config refuses. The recipe file is the ``recipe`` rule's (the same
    look-up fills ``recipe_missing``)."""
    if look is None or look.kind == "source":
        return []
    if not look.finished:
        return [info("target_preflight_unfinished", f"in {look.where}: {look.message}; launch runs it again in "
                     "the target, with a longer bound, before training starts", "container.image")]
    if look.skipped:
        return [warning("target_preflight_skipped", f"in {look.where}: {look.message}: the overrides were not "
                        "composed before launch", "container.image",
                        "use an image with verl's dependencies (hydra-core): run_training.sh needs them too")]
    if look.ok:
        return []
    if look.kind == "package":
        return [error("target_package_missing", f"{look.message} (looked up in {look.where})", look.field, look.hint)]
    override = f" (override: {look.override})" if look.override else ""
    in_extra = look.override is not None and any(look.override.lstrip("+~").split("=", 1)[0] ==
                                                 o.lstrip("+~").split("=", 1)[0] for o in spec.extra_overrides)
    field = "extra_overrides" if in_extra else "container.image" if look.override is None else None
    hint = ("fix the key (spelling, or the '+' prefix for keys verl does not define) in the spec"
            if look.override else None)
    return [error("target_preflight_failed", f"preflight compose failed in {look.where}: {look.message}{override}",
                  field, hint)]
