"""Tri-state probes of a side: server, heartbeat, evaluator, VRAM."""
