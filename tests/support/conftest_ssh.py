"""SSH fixtures: a real OpenSSH sshd on 127.0.0.1 (see tests/support/sshd.py).

Register with `pytest_plugins = ["tests.support.conftest_ssh"]` in tests/conftest.py (or `-p tests.support.conftest_ssh`).

- `sshd_server` (session): one sshd for the whole run; reaped by pid at the end.
- `sshd` (function): the same server, restarted first if an earlier test stopped it.
- `ssh_known_hosts` (function): a known_hosts file holding the server's real host key.
- `ssh_cfg` (function): a HostConfig for that server (type ssh, os linux, key auth, that known_hosts).

A missing /usr/sbin/sshd FAILS (never skips): CI installs openssh-server.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ops.model import HostConfig
from tests.support.sshd import MISSING, SSHD, Sshd


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory):
    import os
    if not os.path.exists(SSHD):
        pytest.fail(MISSING, pytrace=False)
    server = Sshd.create(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def sshd(sshd_server: Sshd) -> Sshd:
    if sshd_server.proc is None or sshd_server.proc.poll() is not None:
        sshd_server.start()
    return sshd_server


@pytest.fixture
def ssh_known_hosts(sshd: Sshd, tmp_path: Path) -> Path:
    return sshd.write_known_hosts(tmp_path / "known_hosts")


@pytest.fixture
def ssh_cfg(sshd: Sshd, ssh_known_hosts: Path) -> HostConfig:
    return HostConfig(name="sshd", type="ssh", os="linux", address="127.0.0.1", port=sshd.port,
                      user=sshd.user, known_hosts=str(ssh_known_hosts),
                      client_keys=(str(sshd.client_key),), connect_timeout_s=5.0)
