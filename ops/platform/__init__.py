"""Hosts: one async interface to run argv on a machine, local or remote, always with a timeout
(ops/platform/base.py). Empty on purpose: the sim's fake tools import ops.platform.atomic and must start
fast, without the whole platform."""
