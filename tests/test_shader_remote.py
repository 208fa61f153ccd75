"""The shader cache on the remote stores sccache offers beside Redis: an S3-compatible bucket
(moto's server) and a WebDAV folder (wsgidav), both real servers on 127.0.0.1 started and
stopped by the tests, configured with the variables users set for sccache. The launcher runs
the real glslc, as ggml-vulkan's vulkan-shaders-gen calls it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from _redis import free_port
from _stores import MotoS3, WebDav
from test_shader_cache import compile_with, needs_glslc, stats, tree
from onebit_build.building.shaders import session as shaders
from onebit_build.building.cache.compiler import Launcher
from onebit_build.building.shaders.glslc_http import S3Store
from onebit_build.building.shaders.shader_remote import plan_remote, settings_for
from onebit_build.core.errors import ConfigError

ENTRY = "onebit-glslc/1/"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoS3(tmp_path_factory.mktemp("moto")).start()
    server.client().create_bucket(Bucket="shaders")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def dav(tmp_path_factory):
    server = WebDav(tmp_path_factory.mktemp("dav")).start()
    yield server
    server.stop()


class Store:
    """One backend under test: the variables a user sets, and the test's own view of its entries."""

    def __init__(self, kind: str, server, prefix: str):
        self.kind, self.server, self.prefix = kind, server, prefix

    def env(self) -> dict[str, str]:
        return self.server.env("shaders", self.prefix) if self.kind == "s3" else self.server.env(self.prefix)

    def entries(self) -> dict[str, bytes]:
        """Each entry the store holds (name -> bytes), read with the server's own means."""
        if self.kind == "s3":
            client = self.server.client()
            found = client.list_objects_v2(Bucket="shaders", Prefix=self.prefix).get("Contents", [])
            return {o["Key"]: client.get_object(Bucket="shaders", Key=o["Key"])["Body"].read() for o in found}
        root = self.server.share
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and p.relative_to(root).as_posix().startswith(self.prefix)}

    def replace(self, name: str, data: bytes) -> None:
        if self.kind == "s3":
            self.server.client().put_object(Bucket="shaders", Key=name, Body=data)
        else:
            (self.server.share / name).write_bytes(data)


@pytest.fixture(params=["s3", "webdav"])
def store(request, tmp_path):
    server = request.getfixturevalue("s3" if request.param == "s3" else "dav")
    return Store(request.param, server, f"team-{tmp_path.name}/")  # a prefix per test: stores are shared


def launcher(build: Path, local: Path, backend: str, env: dict[str, str]) -> tuple[Path, shaders.ShaderCache]:
    """The launcher as a build whose compiler cache is on ``backend`` installs it."""
    own = {k: v for k, v in os.environ.items() if not k.startswith(("SCCACHE_", "AWS_"))}
    ln = Launcher(kind="sccache", program="/usr/bin/sccache", backend=backend)
    cache = shaders.resolve(ln, {**own, "ONEBIT_SHADER_CACHE_DIR": str(local), **env})
    assert cache.remote is not None and cache.remote.kind == backend, cache
    return shaders.install(cache, build), cache


def log(build: Path) -> list[str]:
    return (build / "onebit-glslc" / "stats.log").read_text().splitlines()


# --------------------------------------------------------------------------- the real stores


@needs_glslc
def test_entries_are_shared_across_machines_through_the_store(store, tmp_path):
    src1, src2 = tree(tmp_path / "m1"), tree(tmp_path / "m2" / "deeper")
    b1, b2 = tmp_path / "m1" / "build", tmp_path / "m2" / "deeper" / "build"
    one, _ = launcher(b1, tmp_path / "local1", store.kind, store.env())
    assert compile_with(one, src1, b1 / "x.spv", "-DSCALE=2.0").returncode == 0
    (name,) = store.entries()
    assert name.startswith(store.prefix + ENTRY)
    two, _ = launcher(b2, tmp_path / "local2", store.kind, store.env())
    done = compile_with(two, src2, b2 / "x.spv", "-DSCALE=2.0")
    assert (done.returncode, done.stderr) == (0, "")
    assert stats(b1) == (0, 1, 0) and log(b2) == [f"hit {store.kind}"]
    plain = compile_with("glslc", src2, tmp_path / "plain" / "x.spv", "-DSCALE=2.0")
    assert plain.returncode == 0
    assert (b1 / "x.spv").read_bytes() == (b2 / "x.spv").read_bytes() == (tmp_path / "plain" / "x.spv").read_bytes()
    assert [p for p in (tmp_path / "local2").rglob("*") if p.is_file()]  # kept here for the next build
    settings = b2 / "onebit-glslc" / "glslc.json"
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600


@needs_glslc
def test_a_tampered_entry_in_the_store_is_refused_and_replaced(store, tmp_path):
    src, b1, b2 = tree(tmp_path / "m"), tmp_path / "m" / "b1", tmp_path / "m" / "b2"
    one, _ = launcher(b1, tmp_path / "local1", store.kind, store.env())
    assert compile_with(one, src, b1 / "x.spv", "-DSCALE=2.0").returncode == 0
    ((name, good),) = store.entries().items()
    head, _, body = good.partition(b"\n{")  # the magic line, then the header line with the sha256
    header, _, spirv = body.partition(b"\n")
    store.replace(name, head + b"\n{" + header + b"\n" + spirv[:-8] + bytes(b ^ 0xFF for b in spirv[-8:]))
    two, _ = launcher(b2, tmp_path / "local2", store.kind, store.env())
    done = compile_with(two, src, b2 / "x.spv", "-DSCALE=2.0")
    assert (done.returncode, done.stderr) == (0, "")
    assert (b2 / "x.spv").read_bytes() == (b1 / "x.spv").read_bytes()  # glslc's bytes, not the planted ones
    assert log(b2) == ["error entry: damaged entry", "miss"]
    assert store.entries() == {name: good}  # the store holds the right entry again
    local = [p.read_bytes() for p in (tmp_path / "local2").rglob("*") if p.is_file()]
    assert local == [good]


@needs_glslc
def test_a_store_that_fails_is_one_warning_and_glslc_compiles(store, tmp_path):
    env = store.env()
    if store.kind == "s3":
        env["SCCACHE_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    else:
        env["SCCACHE_WEBDAV_PASSWORD"] = "wrong"  # the server answers 401
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    prog, cache = launcher(b, tmp_path / "local", store.kind, env)
    for n, scale in enumerate(("2.0", "3.0", "4.0")):
        done = compile_with(prog, src, b / f"{n}.spv", f"-DSCALE={scale}")
        assert (done.returncode, done.stderr) == (0, "")
        assert compile_with("glslc", src, tmp_path / "plain" / f"{n}.spv", f"-DSCALE={scale}").returncode == 0
        assert (b / f"{n}.spv").read_bytes() == (tmp_path / "plain" / f"{n}.spv").read_bytes()
    lines = log(b)
    assert lines.count("miss") == 3 and sum(ln.startswith(f"error {store.kind}") for ln in lines) == 1, lines
    run = shaders.ShaderRun(cache=cache, build_dir=b)
    doc = run.report()
    assert len(run.warnings or []) == 1 and f"the shared store {store.kind}" in run.warnings[0]
    assert len(shaders.ShaderRun(cache=cache, build_dir=b).report()["warnings"]) == 1
    secret = env.get("SCCACHE_WEBDAV_PASSWORD") or env["AWS_SECRET_ACCESS_KEY"]
    assert secret not in str(doc) + " ".join(run.warnings)
    assert not store.entries()


# --------------------------------------------------------------------------- settings (pure)


def test_s3_settings_follow_sccaches_variables(tmp_path):
    env = {"SCCACHE_BUCKET": "team-cache", "SCCACHE_ENDPOINT": "minio.example:9000", "SCCACHE_S3_USE_SSL": "false",
           "SCCACHE_S3_KEY_PREFIX": "/ci/", "AWS_ACCESS_KEY_ID": "AKIAX", "AWS_SECRET_ACCESS_KEY": "very-secret",
           "HOME": str(tmp_path)}
    r = plan_remote("s3", env)
    assert r.settings["base"] == "http://minio.example:9000/team-cache" and r.settings["prefix"] == "ci/"
    assert r.public == "http://minio.example:9000/team-cache/ci/" and "very-secret" not in repr(r)
    aws = plan_remote("s3", {"SCCACHE_BUCKET": "b-1", "SCCACHE_REGION": "eu-west-1", "HOME": str(tmp_path)})
    assert aws.settings["base"] == "https://b-1.s3.eu-west-1.amazonaws.com" and "read only" in aws.public
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[ci]\naws_access_key_id = AKIAP\naws_secret_access_key = s\n")
    prof = plan_remote("s3", {"SCCACHE_BUCKET": "b-1", "HOME": str(tmp_path), "AWS_PROFILE": "ci"})
    assert prof.settings["access_key"] == "AKIAP" and "read only" not in prof.public
    anon = plan_remote("s3", {**env, "SCCACHE_S3_NO_CREDENTIALS": "true"})
    assert "access_key" not in anon.settings
    for bad in ({"SCCACHE_BUCKET": "Bad_Bucket"}, {"SCCACHE_BUCKET": "ok-b", "SCCACHE_ENDPOINT": "ftp://h"},
                {"SCCACHE_BUCKET": "ok-b", "SCCACHE_S3_KEY_PREFIX": "../up"},
                {"SCCACHE_BUCKET": "ok-b", "SCCACHE_ENDPOINT": "http://u:p@h:1"}):
        with pytest.raises(ConfigError):
            plan_remote("s3", {**bad, "HOME": str(tmp_path)})


def test_webdav_and_other_backends(tmp_path):
    r = plan_remote("webdav", {"SCCACHE_WEBDAV_ENDPOINT": "https://dav.example/cache/", "SCCACHE_WEBDAV_TOKEN": "tk"})
    assert settings_for(r) == {"kind": "webdav", "base": "https://dav.example/cache", "prefix": "", "token": "tk"}
    assert r.public == "https://dav.example/cache/"
    with pytest.raises(ConfigError):
        plan_remote("webdav", {"SCCACHE_WEBDAV_ENDPOINT": "https://dav.example/", "SCCACHE_WEBDAV_TOKEN": "a\nb"})
    assert plan_remote("gha", {"SCCACHE_GHA_ENABLED": "on"}) is None and plan_remote("local", {}) is None
    ln = Launcher(kind="sccache", program="/x/sccache", backend="s3")
    cache = shaders.plan_shader_cache(ln, glslc="/usr/bin/glslc", version="v",
                                      env={"SCCACHE_BUCKET": "Not A Bucket", "ONEBIT_SHADER_CACHE_DIR": str(tmp_path)})
    assert cache.active and cache.remote is None and "SCCACHE_BUCKET" in (cache.problem or "")


def test_s3_requests_are_signed_as_botocore_signs_them():
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    store = S3Store({"base": "http://127.0.0.1:9000/shaders", "region": "eu-central-1", "prefix": "p/",
                     "access_key": "AKIAEXAMPLE", "secret_key": "secret/key+1", "session_token": "tok"}, prefix=ENTRY)
    url, blob, now = store._url("ab" * 32), b"\x03\x02\x23\x07spirv", 1767225600.0
    ours = store._headers("PUT", url, blob, now=now)
    auth = S3SigV4Auth(Credentials("AKIAEXAMPLE", "secret/key+1", "tok"), "s3", "eu-central-1")
    req = AWSRequest(method="PUT", url=url, data=blob, headers={
        "x-amz-date": ours["x-amz-date"], "x-amz-content-sha256": ours["x-amz-content-sha256"],
        "x-amz-security-token": "tok"})
    req.context["timestamp"] = ours["x-amz-date"]
    theirs = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert ours["authorization"].endswith(f"Signature={theirs}")
    assert ours["x-amz-date"] == "20260101T000000Z" and ours["host"] == "127.0.0.1:9000"


def test_doctor_says_whether_the_store_answers(store):
    from onebit_build.doctor.caches import shader_store_check

    ln = Launcher(kind="sccache", program="/usr/bin/sccache", backend=store.kind)
    good = shader_store_check(ln, store.env())
    assert good.ok is True and good.detail.startswith(store.kind) and good.detail.endswith("answers")
    env = {**store.env(), "SCCACHE_ENDPOINT": f"http://127.0.0.1:{free_port()}",
           "SCCACHE_WEBDAV_ENDPOINT": f"http://127.0.0.1:{free_port()}/"}
    bad = shader_store_check(ln, env)
    assert bad.ok is False and bad.fix and "secret" not in bad.detail
    assert shader_store_check(Launcher(kind="sccache", program="/x", backend="local"), {}).ok is None
