"""OCI references, registry credentials and the binary-cache artifact format, read as hostile
input: every field checked before anything is fetched or written."""

from __future__ import annotations

import base64
import json

import pytest

from onebit_build.distribution.binary_cache import (ARTIFACT_TYPE, FILE_MEDIA, LINK_MEDIA, Entry, config_bytes,
                                                manifest_doc, parse_manifest, path_ok, tag_of)
from onebit_build.distribution.oci_ref import credentials_for, parse_ref
from onebit_build.core.errors import ConfigError, FetchError

KEY = "ab" * 32
DIGEST = "sha256:" + "cd" * 32


@pytest.mark.parametrize("text, registry, repo, tag, digest", [
    ("oci://127.0.0.1:5000/builds", "127.0.0.1:5000", "builds", None, None),
    ("oci://registry.example.org/team/llama-builds:nightly", "registry.example.org", "team/llama-builds", "nightly",
     None),
    (f"oci://localhost/a/b_c__d-e@{DIGEST}", "localhost", "a/b_c__d-e", None, DIGEST),
    (f"oci://[::1]:5000/builds:v1@{DIGEST}", "[::1]:5000", "builds", "v1", DIGEST),
])
def test_references_that_are_taken(text, registry, repo, tag, digest):
    ref = parse_ref(text, "--from")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repo, tag, digest)
    assert str(ref) == text


@pytest.mark.parametrize("text, why", [
    ("https://127.0.0.1/builds", "not an oci:// reference"),
    ("oci://user:pw@127.0.0.1/builds", "credentials in the reference are refused"),
    ("oci://127.0.0.1:99999/builds", "not a host name"),
    ("oci://bad_host!/builds", "not a host name"),
    ("oci://127.0.0.1/Builds", "lower-case"),
    ("oci://127.0.0.1/builds/../x", "lower-case"),
    ("oci://127.0.0.1/builds:-tag", "a tag is up to 128"),
    ("oci://127.0.0.1/builds:" + "t" * 129, "a tag is up to 128"),
    ("oci://127.0.0.1/builds@sha256:abc", "a digest is sha256:"),
    ("oci://127.0.0.1/", "lower-case"),
    ("oci://127.0.0.1/builds;rm -rf", "lower-case"),
])
def test_references_that_are_refused(text, why):
    with pytest.raises(ConfigError) as err:
        parse_ref(text, "--from")
    assert why in err.value.message and "pw" not in str(err.value)


def test_loopback_registries_are_plain_http_and_others_https():
    assert parse_ref("oci://127.0.0.1:5000/b", "x").base_url == "http://127.0.0.1:5000/v2/b"
    assert parse_ref("oci://[::1]:5000/b", "x").base_url == "http://[::1]:5000/v2/b"
    assert parse_ref("oci://localhost/b", "x").loopback
    assert parse_ref("oci://10.0.0.1:5000/b", "x").base_url == "https://10.0.0.1:5000/v2/b"


def test_credentials_come_from_the_environment_then_the_docker_config(tmp_path):
    home = tmp_path / "home"
    (home / ".docker").mkdir(parents=True)
    auth = base64.b64encode(b"carol:from-home").decode()
    (home / ".docker" / "config.json").write_text(json.dumps({"auths": {"reg.example:5000": {"auth": auth}}}))
    env = {"HOME": str(home)}
    found = credentials_for("reg.example:5000", env)
    assert (found.username, found.secret) == ("carol", "from-home") and "config.json" in found.origin
    assert "from-home" not in repr(found)  # never in a traceback or a log line
    assert credentials_for("other.example", env) is None
    docker_config = tmp_path / "dc"
    docker_config.mkdir()
    (docker_config / "config.json").write_text(json.dumps(
        {"auths": {"https://reg.example:5000": {"username": "dave", "password": "from-docker-config"}}}))
    assert credentials_for("reg.example:5000", {**env, "DOCKER_CONFIG": str(docker_config)}).username == "dave"
    both = {**env, "ONEBIT_OCI_USERNAME": "erin", "ONEBIT_OCI_PASSWORD": "from-env"}
    assert credentials_for("reg.example:5000", both).username == "erin"
    (home / ".docker" / "config.json").write_text("{not json")
    assert credentials_for("reg.example:5000", env) is None  # a broken file is no credentials, not a crash


def _manifest(**change) -> bytes:
    entries = [Entry(rel="bin/llama-server", digest=DIGEST, size=10, mode=0o755),
               Entry(rel="bin/libx.so", digest=DIGEST, size=9, link="libx.so.1"),
               Entry(rel="share/onebit-build/build-manifest.json", digest=DIGEST, size=3)]
    doc = manifest_doc(entries, recipe="default", key=KEY, created="now", verified="verified",
                       config=config_bytes(recipe="default", key=KEY, verified="verified"))
    for path, value in change.items():
        *parents, last = path.split("__")
        node = doc
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[last] = value
    return json.dumps(doc).encode()


def test_an_artifact_manifest_reads_back():
    art = parse_manifest(_manifest(), "oci://x/y")
    assert (art.recipe, art.key, art.verified) == ("default", KEY, "verified")
    assert [(e.rel, e.mode, e.link) for e in art.entries] == [
        ("bin/libx.so", 0o644, ""), ("bin/llama-server", 0o755, None),
        ("share/onebit-build/build-manifest.json", 0o644, None)]
    assert tag_of("default", KEY) == f"default-{KEY}" and tag_of("my recipe!", KEY).startswith("my-recipe-")


@pytest.mark.parametrize("change, why", [
    ({"artifactType": "application/vnd.other"}, f"artifactType is not {ARTIFACT_TYPE}"),
    ({"annotations__dev.onebit-build.key": "12"}, "no build key"),
    ({"annotations__dev.onebit-build.recipe": "../x"}, "no recipe name"),
    ({"layers__0__annotations__org.opencontainers.image.title": "bin/../../etc/passwd"}, "is not a file under"),
    ({"layers__0__annotations__org.opencontainers.image.title": "/bin/llama-server"}, "is not a file under"),
    ({"layers__0__annotations__org.opencontainers.image.title": "lib/x.so"}, "is not a file under"),
    ({"layers__0__annotations__org.opencontainers.image.title": "bin/llama-server"}, "appears twice"),
    ({"layers__1__digest": "sha512:00"}, "the digest is not"),
    ({"layers__1__size": True}, "the size is not"),
    ({"layers__1__size": -1}, "the size is not"),
    ({"layers__1__mediaType": "application/vnd.oci.image.layer.v1.tar"}, "media type"),
    ({"layers__1__annotations__dev.onebit-build.mode": "4755"}, "media type"),
    ({"layers__0__size": 4096}, "a link's target is 1 to 255 bytes"),
    ({"layers": []}, "no list of files"),
])
def test_a_manifest_that_is_not_a_published_build_is_refused(change, why):
    with pytest.raises(FetchError) as err:
        parse_manifest(_manifest(**change), "oci://x/y")
    assert why in err.value.message


def test_only_plain_names_in_the_two_folders_are_paths():
    assert path_ok("bin/llama-server") and path_ok("share/onebit-build/provenance.intoto.jsonl")
    assert path_ok("share/onebit-build/build-manifest.json") and path_ok("share/onebit-build/sbom.cdx.json")
    for bad in ("bin", "bin/", "bin/a/b", "./bin/x", "bin/.hidden", "share/x", "bin/a\nb", "bin/x y",
                "share/onebit-build/run.sh", "share/onebit-build/x.cdx.json.sh"):
        assert not path_ok(bad), bad
    assert FILE_MEDIA != LINK_MEDIA
