"""The test namespaces are the sim's (sim/netns.py): `sim up --remote` builds its hosts with them too."""
from sim.netns import NetNs, available

__all__ = ["NetNs", "available"]
