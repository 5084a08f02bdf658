"""Local file reads: inline on disk filesystems, in a thread under a timeout on anything else."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ops.platform import files
from ops.platform.files import DISK_FS, fs_type, parse_mountinfo, stat_file, tail_lines
from ops.platform.local import LocalHost

# Lines in the format of /proc/self/mountinfo (proc(5)); the sshfs and nfs ones as a login node has them.
MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 253:1 / / rw,relatime - ext4 /dev/vda1 rw
40 27 0:45 / /data rw,relatime shared:1 - nfs4 fs01:/export/data rw,vers=4.2
41 40 0:46 / /data/scratch rw,relatime - xfs /dev/nvme0n1 rw
42 27 0:47 / /home/op/remote rw,nosuid - fuse.sshfs op@gw:/ rw
43 27 0:48 / /mnt/my\040disk rw - ext4 /dev/sdb1 rw
44 27 0:49 / /mnt/over rw - ext4 /dev/sdc1 rw
45 44 0:50 / /mnt/over rw - cifs //nas/share rw
"""


def test_mountinfo_lines_give_each_path_its_filesystem() -> None:
    m = parse_mountinfo(MOUNTINFO)
    assert fs_type(m, "/data/run1/eval.log") == "nfs4"
    assert fs_type(m, "/data/scratch/eval.log") == "xfs"          # a disk mounted inside the NFS tree
    assert fs_type(m, "/home/op/remote/x") == "fuse.sshfs"
    assert fs_type(m, "/mnt/my disk/log") == "ext4"                # \040 is a space
    assert fs_type(m, "/mnt/over/log") == "cifs"                   # mounted over: the later line wins
    assert fs_type(m, "/work/logs/eval.log") == "ext4"             # falls back to /
    assert fs_type(parse_mountinfo("garbage\n\n1 2 3\n"), "/x") is None


@pytest.mark.parametrize("fstype, inline", [("ext4", True), ("tmpfs", True), ("nfs4", False),
                                             ("fuse.sshfs", False), ("cifs", False), ("lustre", False)])
def test_only_disk_filesystems_are_read_inline(tmp_path: Path, monkeypatch, fstype: str, inline: bool) -> None:
    log = tmp_path / "eval.log"
    log.write_text("a\nb\nc\n")
    real_root = str(tmp_path.resolve())
    policy = files._InlinePolicy()
    monkeypatch.setattr(policy, "_mount_table", lambda now: {"/": "ext4", real_root: fstype})
    monkeypatch.setattr(files, "_policy", policy)
    hops: list[object] = []
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(fn, *a):
        hops.append(fn)
        return await real_to_thread(fn, *a)
    monkeypatch.setattr(files.asyncio, "to_thread", counting_to_thread)

    async def go():
        return await stat_file(LocalHost(), str(log), 5.0), await tail_lines(LocalHost(), str(log), 2, 5.0)
    st, tail = asyncio.run(go())
    assert st.exists and st.size == 6 and tail == ["b", "c"]
    reads_in_threads = [f for f in hops if f is not files.os.path.realpath]
    assert (len(reads_in_threads) == 0) is inline, hops
    assert (fstype in DISK_FS) is inline


def test_a_symlink_into_a_network_mount_is_not_read_inline(tmp_path: Path, monkeypatch) -> None:
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    (nfs / "eval.log").write_text("x\n")
    local = tmp_path / "local"
    local.mkdir()
    (local / "eval.log").symlink_to(nfs / "eval.log")
    policy = files._InlinePolicy()
    monkeypatch.setattr(policy, "_mount_table",
                        lambda now: {"/": "ext4", str(tmp_path.resolve()): "ext4", str(nfs.resolve()): "nfs4"})
    assert asyncio.run(policy.inline(str(local / "eval.log"), 5.0)) is False
    assert asyncio.run(policy.inline(str(tmp_path / "other.log"), 5.0)) is True


def test_an_unreadable_mount_table_sends_every_read_to_a_thread(tmp_path: Path, monkeypatch) -> None:
    policy = files._InlinePolicy()
    monkeypatch.setattr(policy, "_mount_table", lambda now: None)
    assert asyncio.run(policy.inline(str(tmp_path / "eval.log"), 5.0)) is False
