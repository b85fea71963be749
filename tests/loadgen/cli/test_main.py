from pathlib import Path

from tests.loadgen.cli.clikit import loadgen


def test_serve_help_is_the_engines() -> None:
    out = loadgen("serve", "--help")
    assert out.returncode == 0 and "--batch-invariant" in out.stdout and "--max-num-seqs" in out.stdout


def test_library_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    out = loadgen("run", str(tmp_path / "missing.toml"))
    assert out.returncode == 2
    assert out.stderr.startswith("loadgen run: error: ") and "missing.toml: cannot read scenario file" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unknown_option_shows_the_commands_usage_and_the_nearest_option() -> None:
    out = loadgen("run", "--levles", "0,1")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: loadgen run ")
    assert out.stderr.endswith("loadgen run: error: unrecognized arguments: --levles (did you mean --levels?)\n")


def test_no_option_is_taken_by_a_prefix() -> None:
    for command, prefix, full in (("run", "--level", "--levels"), ("onset", "--max", "--max-level")):
        out = loadgen(command, prefix, "1")
        assert out.returncode == 2 and f"usage: loadgen {command} " in out.stderr, out.stderr
        assert f"unrecognized arguments: {prefix} (did you mean {full}?)" in out.stderr
