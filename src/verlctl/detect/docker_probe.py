"""Docker: the engine, and the containers and images that look like verl / Ascend ones.

Uses the docker SDK (``docker.from_env()``; the API version is negotiated with the engine, never
pinned), imported lazily. No engine (no socket, a dead socket, permission denied) is a result:
``Unavailable(code=no_engine)``.
"""

from __future__ import annotations

from pydantic import BaseModel

from verlctl.detect.common import ProbeModel, Unavailable, UnavailableCode, unavailable

DEFAULT_PATTERNS = ("verl", "ascend")


class ContainerInfo(BaseModel):
    id: str  # short id (12 hex)
    name: str
    image: str  # the image reference the container was created from
    image_id: str | None = None
    state: str  # created, running, exited, paused, restarting, dead
    status: str | None = None  # 'Up 3 hours', 'Exited (0) 2 days ago'
    labels: dict[str, str] = {}  # e.g. io.verlctl.run on a container verlctl created
    mounts: list[str] = []  # 'SOURCE:DESTINATION[:ro]'

    @property
    def running(self) -> bool:
        return self.state == "running"


class ImageInfo(BaseModel):
    id: str  # short id
    tags: list[str] = []  # 'repo:tag'; empty for dangling images
    size_bytes: int | None = None
    created: int | None = None  # unix time


class DockerInfo(ProbeModel):
    server_version: str | None = None
    api_version: str | None = None  # the negotiated API version
    filtered: bool = True  # True: only names/tags matching ``patterns``
    patterns: list[str] = list(DEFAULT_PATTERNS)
    containers: list[ContainerInfo] = []
    images: list[ImageInfo] = []
    total_containers: int = 0
    total_images: int = 0

    def container(self, name: str) -> ContainerInfo | None:
        return next((c for c in self.containers if c.name == name), None)


def _matches(texts: list[str], patterns: tuple[str, ...] | list[str]) -> bool:
    low = [t.lower() for t in texts if t]
    return any(p.lower() in t for p in patterns for t in low)


def _short(digest: str | None) -> str:
    if not digest:
        return ""
    return digest.split(":", 1)[-1][:12]


def probe_docker(
    all_items: bool = False,
    patterns: tuple[str, ...] | list[str] = DEFAULT_PATTERNS,
    timeout: float = 10.0,
) -> DockerInfo | Unavailable:
    """Containers and images whose name/tag mention ``patterns`` (all of them with ``all_items``)."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return unavailable("docker", UnavailableCode.MISSING_DEPENDENCY, "the docker SDK is not installed")
    try:
        client = docker.from_env(timeout=int(max(1, timeout)))
    except DockerException as exc:
        return unavailable("docker", UnavailableCode.NO_ENGINE, engine_words(exc))
    try:
        version = client.version()
        raw_containers = client.api.containers(all=True)
        raw_images = client.api.images()
    except Exception as exc:  # requests/urllib3 errors are not all DockerException
        return unavailable("docker", UnavailableCode.NO_ENGINE, engine_words(exc))
    finally:
        client.close()
    info = DockerInfo(
        server_version=version.get("Version"),
        api_version=version.get("ApiVersion"),
        filtered=not all_items,
        patterns=list(patterns),
        total_containers=len(raw_containers),
        total_images=len(raw_images),
    )
    for c in raw_containers:
        names = [n.lstrip("/") for n in c.get("Names") or []]
        item = ContainerInfo(
            id=_short(c.get("Id")),
            name=names[0] if names else _short(c.get("Id")),
            image=c.get("Image") or "",
            image_id=_short(c.get("ImageID")) or None,
            state=c.get("State") or "unknown",
            status=c.get("Status"),
            labels={str(k): str(v) for k, v in (c.get("Labels") or {}).items()},
            mounts=[f"{m.get('Source') or m.get('Name') or '?'}:{m.get('Destination') or '?'}"
                    + ("" if m.get("RW", True) else ":ro") for m in c.get("Mounts") or []],
        )
        if all_items or _matches([*names, item.image], patterns):
            info.containers.append(item)
    for im in raw_images:
        tags = [t for t in im.get("RepoTags") or [] if t != "<none>:<none>"]
        item_im = ImageInfo(
            id=_short(im.get("Id")), tags=tags, size_bytes=im.get("Size"), created=im.get("Created")
        )
        if all_items or _matches(tags, patterns):
            info.images.append(item_im)
    info.containers.sort(key=lambda c: c.name)
    info.images.sort(key=lambda i: (i.tags[0] if i.tags else "~", i.id))
    return info


def engine_words(exc: BaseException) -> str:
    """Why the Docker engine cannot be used, in words (not the SDK's exception tuple), with what to do."""
    import os

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(exc)
    if "FileNotFoundError" in text or "No such file or directory" in text:
        return f"no Docker engine is running here (no socket at {where}): start dockerd, or set DOCKER_HOST"
    if "PermissionError" in text or "Permission denied" in text:
        return (f"no permission to use the Docker engine at {where}: add your user to the docker group "
                "(then log in again), or run as a user who may")
    if "Connection refused" in text or "ConnectionRefused" in text:
        return f"nothing answers at {where}: start dockerd, or set DOCKER_HOST to the engine's address"
    if "timed out" in text.lower() or "Timeout" in text:
        return f"the Docker engine at {where} did not answer in time: it may be overloaded or hung"
    return f"the Docker engine at {where} cannot be used: {_one_line(exc)}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__
