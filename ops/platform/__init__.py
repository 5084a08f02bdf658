"""Hosts: one async interface to run argv on a machine, local or remote, always with a timeout."""
from ops.platform.base import Host, Result

__all__ = ["Host", "Result"]
