"""The runtime floor read from real ELF files of this machine, held against binutils' own
reading of them (``readelf --version-info``), and systems made of real libraries in a folder."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from onebit_build.building.elfdeps import read_elf, resolve
from onebit_build.core.errors import RuntimeFloorError
from onebit_build.evidence.floor import (Floor, System, check_runs_here, floor_of, highest, packages_text,
                                         recorded_floor, refusal, shortfalls, system_at, version_key)

PYTHON = Path(os.path.realpath(sys.executable))


def readelf_versions(path: Path, section: str) -> dict[str, set[str]]:
    """{library: versions} of ``.gnu.version_r`` (section "needs") or {"": versions} of
    ``.gnu.version_d`` ("defs"), as readelf prints them."""
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not installed")
    text = subprocess.run(["readelf", "-W", "--version-info", str(path)], capture_output=True, text=True,
                          check=True).stdout
    out: dict[str, set[str]] = {}
    part, lib = None, ""
    for line in text.splitlines():
        if line.startswith("Version needs section"):
            part = "needs"
        elif line.startswith("Version definition section"):
            part = "defs"
        elif line.startswith("Version symbols section"):
            part = None
        elif part == section == "needs" and (m := re.search(r"File: (\S+)", line)):
            lib = m.group(1)
        elif part == section and (m := re.search(r"Name: (\S+)", line)):
            out.setdefault(lib if section == "needs" else "", set()).add(m.group(1))
    return out


def test_a_version_is_a_family_and_its_numbers():
    assert version_key("GLIBC_2.34") == ("GLIBC", (2, 34))
    assert version_key("GLIBCXX_3.4.30") == ("GLIBCXX", (3, 4, 30))
    assert version_key("CXXABI_1.3.13") == ("CXXABI", (1, 3, 13))
    assert version_key("GLIBC_PRIVATE") is None and version_key("libc.so.6") is None
    # 2.9 < 2.14: numbers, not text
    assert highest(["GLIBC_2.9", "GLIBC_2.14", "GLIBC_2.2.5", "GCC_3.0", "GLIBC_PRIVATE"]) == (
        "GCC_3.0", "GLIBC_2.14", "GLIBC_PRIVATE")


def test_the_floor_of_a_real_program_is_binutils_reading_of_it():
    """apt-get (C++, no RUNPATH: every library it loads is the system's): every library readelf
    says it asks versions of is in the floor with the highest of each family, and nothing else."""
    program = shutil.which("apt-get")
    if program is None:
        pytest.skip("no apt-get on this machine to read")
    program = Path(os.path.realpath(program))
    assert read_elf(program).runpath == ()
    floor = floor_of([program])
    want = {lib: set(highest(vs)) for lib, vs in readelf_versions(program, "needs").items()}
    assert "libc.so.6" in want and "libstdc++.so.6" in want
    assert {lib: set(vs) for lib, vs in floor.needs.items() if vs} == want
    assert set(floor.needs) == set(read_elf(program).needed)
    assert floor.highest_of("GLIBCXX") == max((v for v in want["libstdc++.so.6"] if v.startswith("GLIBCXX_")),
                                              key=lambda v: version_key(v)[1])


def test_what_a_runpath_supplies_travels_and_its_own_needs_count():
    """A program whose RUNPATH supplies a library: that library is not the system's, but what
    it asks of the system is in the floor."""
    info = read_elf(PYTHON)
    carried = [n for n in info.needed if resolve(n, info) is not None]
    if not carried:
        pytest.skip(f"this python ({PYTHON}) loads nothing through a RUNPATH")
    floor = floor_of([PYTHON])
    lib = resolve(carried[0], info)
    assert carried[0] not in floor.needs
    for name, versions in readelf_versions(lib, "needs").items():
        for v in highest(versions):  # each family at least as high as the carried library asks
            family, number = version_key(v) or (v, ())
            kept = [version_key(w) or (w, ()) for w in floor.needs[name]]
            assert any(f == family and n >= number for f, n in kept), (name, v, floor.needs[name])


def fake_root(tmp_path: Path) -> Path:
    """A root with this machine's real libc.so.6 in usr/lib/<triplet>, reached through the
    merged-/usr link lib -> usr/lib and an absolute link, as Debian lays it out."""
    libc = Path(os.path.realpath(system_at(None).find("libc.so.6")))
    root = tmp_path / "root"
    (root / "usr" / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    shutil.copy2(libc, root / "usr" / "lib" / "x86_64-linux-gnu" / "libc-real.so")
    (root / "usr" / "lib" / "x86_64-linux-gnu" / "libc.so.6").symlink_to("/usr/lib/x86_64-linux-gnu/libc-real.so")
    (root / "lib").symlink_to("usr/lib")
    return root


def test_a_system_in_a_folder_is_judged_by_its_own_libraries(tmp_path):
    root = fake_root(tmp_path)
    system = System(root=root)
    found = system.find("libc.so.6")
    assert found is not None and found.is_relative_to(root) and found.name == "libc-real.so"
    defined = readelf_versions(found, "defs")[""]
    newest = max((v for v in defined if (version_key(v) or ("",))[0] == "GLIBC"), key=lambda v: version_key(v)[1])
    floor = Floor(needs={"libc.so.6": ("GLIBC_2.99", newest), "libnothere.so.7": ()},
                  packages=({"name": "libnothere7", "version": "1.0", "libraries": ["libnothere.so.7"]},))
    got = shortfalls(floor, system)
    assert [(s.library, s.version, s.has) for s in got] == [("libnothere.so.7", None, None),
                                                            ("libc.so.6", "GLIBC_2.99", newest)]
    line, hint = refusal(floor, got, f"the system in {root}")
    assert line == (f"the system in {root} cannot run this build: libnothere.so.7 is missing (Debian package "
                    f"libnothere7); libc.so.6 lacks GLIBC_2.99 (the newest it has is {newest})")
    assert hint.startswith("use a newer system (glibc 2.99 or later), or build it on this one")
    assert hint.endswith("apt-get install libnothere7")
    # What the root has is enough for a floor of what it has.
    assert shortfalls(Floor(needs={"libc.so.6": (newest,)}), system) == []


def test_missing_libraries_alone_are_one_apt_line_and_exit_16(tmp_path):
    root = fake_root(tmp_path)
    floor = Floor(needs={"libc.so.6": (), "libgomp.so.1": ("GOMP_4.5",), "libssl.so.3": (), "libcrypto.so.3": ()},
                  packages=({"name": "libssl3", "version": "3", "libraries": ["libssl.so.3", "libcrypto.so.3"]},
                            {"name": "libgomp1", "version": "12", "libraries": ["libgomp.so.1"]}))
    with pytest.raises(RuntimeFloorError) as err:
        check_runs_here(floor, root=root)
    assert err.value.exit_code == 16
    assert err.value.hint == "install them: apt-get install libgomp1 libssl3"
    assert str(err.value).count(" is missing ") == 3 and "libc.so.6" not in str(err.value)


def test_this_box_runs_what_it_built():
    """This machine has what its own python needs: no shortfall, nothing raised."""
    check_runs_here(floor_of([PYTHON]))


def test_the_floor_document_round_trips_and_junk_is_refused():
    floor = Floor(needs={"libc.so.6": ("GLIBC_2.34",), "libstdc++.so.6": ("CXXABI_1.3.13", "GLIBCXX_3.4.30")},
                  packages=({"name": "libc6", "version": "2.36", "libraries": ["libc.so.6"]},))
    doc = floor.to_doc()
    assert doc["highest"] == {"GLIBC": "GLIBC_2.34", "GLIBCXX": "GLIBCXX_3.4.30", "CXXABI": "CXXABI_1.3.13"}
    assert Floor.from_doc(doc) == floor
    for junk in ({}, {"schema": 2, "needs": {}}, {"schema": 1, "needs": []}, "text"):
        with pytest.raises(ValueError):
            Floor.from_doc(junk)  # type: ignore[arg-type]
    text = packages_text(doc)
    assert text is not None and text.splitlines()[-1] == "libc6 2.36" and "apt-get install libc6" in text
    assert packages_text(None) is None and packages_text({"schema": 9}) is None


def test_the_record_names_the_packages_that_give_this_box_the_libraries():
    """A build's manifest record of apt-get's floor: the Debian packages with the versions dpkg
    has installed, each with the libraries it gives."""
    program = shutil.which("apt-get")
    if program is None or shutil.which("dpkg-query") is None:
        pytest.skip("no apt-get and dpkg on this machine")
    doc = recorded_floor([Path(os.path.realpath(program))])
    assert Floor.from_doc(doc).needs == floor_of([Path(os.path.realpath(program))]).needs
    pkgs = {p["name"]: p for p in doc["packages"]}
    for name, lib in (("libc6", "libc.so.6"), ("libstdc++6", "libstdc++.so.6")):
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True).stdout
        assert pkgs[name]["version"] == version and lib in pkgs[name]["libraries"], pkgs
    assert doc["highest"]["GLIBC"].startswith("GLIBC_2.")


def test_links_in_a_system_never_lead_out_of_its_root(tmp_path):
    """An absolute link on the way (lib64 -> /usr/lib64) is followed inside the root, and a link
    that climbs past the root's top stays at the top: this machine's own libc is never found."""
    root = tmp_path / "root"
    (root / "usr" / "lib64").mkdir(parents=True)
    (root / "lib64").symlink_to("/usr/lib64")
    (root / "usr" / "lib64" / "libc.so.6").symlink_to("../../../../../../../../lib/x86_64-linux-gnu/libc.so.6")
    system = System(root=root)
    assert system._inside("/lib64/libc.so.6") == root / "lib" / "x86_64-linux-gnu" / "libc.so.6"
    assert system.find("libc.so.6") is None
    real = fake_root(tmp_path / "other")
    assert System(root=real).find("libc.so.6") == real / "usr" / "lib" / "x86_64-linux-gnu" / "libc-real.so"
