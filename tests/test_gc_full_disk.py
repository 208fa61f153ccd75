"""``gc`` is what frees a full disk, so it runs on one: taking the workspace lock writes the
holder's name best-effort, after the lock is held (a real size-limited tmpfs, filled up)."""

from __future__ import annotations

import errno
import os

from test_reliability import _killed_pull_leftovers, cli, small_disk


def _fill(folder) -> None:
    """Write into ``folder`` until the file system says it is full."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (b"f" * 65536, b"f"):
            try:
                while os.write(fd, chunk):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_gc_and_its_dry_run_work_on_a_full_disk(tmp_path):
    with small_disk(tmp_path / "disk", "2m") as disk:
        ws = disk / "ws"
        left = _killed_pull_leftovers(ws)
        _fill(disk)
        probe = disk / "probe"
        try:
            probe.write_bytes(b"x")
            full = False
        except OSError:
            full = True
        assert full, "the disk is not full"
        dry = cli("--workspace", str(ws), "gc", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert all(f"would remove {p}" in dry.stderr + dry.stdout and p.exists() for p in left), dry.stdout
        done = cli("--workspace", str(ws), "gc")
        assert done.returncode == 0 and not any(p.exists() for p in left), done.stderr
        assert os.statvfs(disk).f_bfree > 0
