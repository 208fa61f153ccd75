"""The verdict of a build, recorded with it and read by every command that uses it, on a tiny
real CMake project whose one output is named as the server is (so that `location`, `serve`
and `smoke` take it for one): VERIFIED, then NOT VERIFIED by a committed reference that
differs, refused by each command (exit 11) unless --allow-unverified, which is said and
recorded; a build whose outputs changed is no longer judged by the old verdict."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli, tiny_recipe


def cli(root: Path, ws: Path, mirrors: Path, *args: str):
    return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "tiny", *args)


def only_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_not_verified_build_is_refused_by_every_command_that_uses_it(tmp_path):
    from onebit_build.running.ports import free_port

    commit = make_repo(tmp_path / "src", TINY_CMAKE)
    bare_mirror(tmp_path / "src", tmp_path / "mirrors", "tiny")
    recipe = tiny_recipe().replace("hello: hello", "llama-server: hello")
    root = project_tree(tmp_path / "proj", pins=f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/t.git"
                                                f"\n    commit: {commit}\n", recipes={"tiny": recipe})
    ws, mirrors = tmp_path / "ws", tmp_path / "mirrors"
    assert cli(root, ws, mirrors, "build").returncode == 0
    reference = root / "references" / "tiny" / "r.json"
    assert cli(root, ws, mirrors, "verify", "--write-reference", str(reference)).returncode == 0
    out = cli(root, ws, mirrors, "verify")
    assert out.returncode == 0, out.stderr
    folder = Path(json.loads((ws / "manifests" / "tiny.json").read_text())["components"][-1]["build_dir"])
    assert json.loads((folder / "verdict.json").read_text())["status"] == "verified"
    out = cli(root, ws, mirrors, "builds")
    assert re.search(r"\bVERIFIED\b", out.stdout) and "up to date" not in out.stdout, out.stdout

    # A committed reference that names other bytes: NOT VERIFIED, recorded beside the manifest.
    doc = json.loads(reference.read_text())
    doc["components"][0]["outputs"][0]["sha256"] = "0" * 64
    reference.write_text(json.dumps(doc))
    out = cli(root, ws, mirrors, "verify")
    assert out.returncode == 11, out.stderr
    recorded = json.loads((folder / "verdict.json").read_text())
    assert recorded["kind"] == "onebit-build/build-verdict" and recorded["status"] == "not-verified"

    prefix = tmp_path / "prefix"
    port = str(free_port())
    for what, args in (("location", ()), ("install", ("--prefix", str(prefix))), ("smoke", ()),
                       ("serve", ("--port", port)), ("publish", ("oci://127.0.0.1:9/x",))):
        out = cli(root, ws, mirrors, what, *args)
        assert out.returncode == 11, (what, out.stderr)
        line = only_line(out.stderr)
        if what != "publish":  # publish verifies again itself
            said = f"error: {what}: the build is NOT VERIFIED against r.json: llama-server differs"
            assert line.startswith(said), line
            assert "--allow-unverified" in line, line
    assert not prefix.exists()
    out = cli(root, ws, mirrors, "builds")
    assert "NOT VERIFIED" in out.stdout, out.stdout
    rows = json.loads(cli(root, ws, mirrors, "builds", "--json").stdout)["builds"]
    assert [r["verdict"] for r in rows] == ["not-verified"] and rows[0]["verdict_line"].startswith("NOT VERIFIED")

    # --allow-unverified: used, said, and recorded in what the command writes.
    out = cli(root, ws, mirrors, "location", "--allow-unverified")
    assert out.returncode == 0 and out.stdout.strip() == str(folder / "hello"), out.stderr
    assert "warning: location: using a NOT VERIFIED build (--allow-unverified)" in out.stderr
    out = cli(root, ws, mirrors, "install", "--prefix", str(prefix), "--allow-unverified")
    assert out.returncode == 0 and "using a NOT VERIFIED build" in out.stderr, out.stderr
    carried = json.loads((prefix / "share" / "onebit-build" / "verdict.json").read_text())
    assert carried["status"] == "not-verified"

    # Other output bytes (a build that gave other outputs): the old verdict no longer judges them.
    hello = folder / "hello"
    data = bytearray(hello.read_bytes())
    data[-1] ^= 0x01
    hello.write_bytes(bytes(data))
    os.utime(hello)
    assert cli(root, ws, mirrors, "build").returncode == 0
    out = cli(root, ws, mirrors, "location")
    assert out.returncode == 0 and out.stdout.strip() == str(hello), out.stderr
    out = cli(root, ws, mirrors, "builds")
    assert "up to date" in out.stdout and "VERIFIED" not in out.stdout, out.stdout
    out = cli(root, ws, mirrors, "install", "--prefix", str(prefix))
    assert out.returncode == 0 and not (prefix / "share" / "onebit-build" / "verdict.json").exists(), out.stderr


def test_a_verdict_that_is_not_one_is_named_and_ignored(tmp_path):
    """Decided on a real manifest written by the project's own functions: a record of other
    outputs is ignored, a damaged one warned about, a NOT VERIFIED one refused with its line."""
    import pytest

    from onebit_build.checking.manifest import (MANIFEST_NAME, ComponentRecord, Manifest, OutputRecord,
                                                write_manifest)
    from onebit_build.checking.verdict import VERDICT_NAME, record_verdict, recorded_verdict, refuse_not_verified
    from onebit_build.core.errors import VerifyError

    (tmp_path / "hello").write_bytes(b"x")
    man = tmp_path / MANIFEST_NAME
    doc = Manifest(recipe="tiny", components=(ComponentRecord(name="hello", build_dir=str(tmp_path), outputs=(
        OutputRecord(name="llama-server", path=str(tmp_path / "hello"), sha256="a" * 64, size=1),)),)).to_doc()
    write_manifest(man, doc)
    assert recorded_verdict(man) is None
    record_verdict(man, "not-verified", "NOT VERIFIED against r.json: llama-server differs\nforged", "evict it")
    with pytest.raises(VerifyError) as caught:
        refuse_not_verified(man, allow=False, what="install")
    assert caught.value.message == "install: the build is NOT VERIFIED against r.json: llama-server differs forged"
    assert refuse_not_verified(man, allow=True, what="install").status == "not-verified"
    doc["components"][0]["outputs"][0]["sha256"] = "b" * 64
    write_manifest(man, doc)
    assert recorded_verdict(man) is None and refuse_not_verified(man, allow=False, what="install") is None
    (tmp_path / VERDICT_NAME).write_text('{"kind": "onebit-build/build-verdict", "schema": 1, "status": "fine"}')
    assert recorded_verdict(man) is None
