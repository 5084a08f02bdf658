"""Results and planning over Bench2Drive checkpoints and routes files: merged scores by Bench2Drive's
rules, per-ability success, ETA by town, the fake-success check, balanced splits and paired comparison.

No Textual. Every module computes on parsed files and returns frozen values, except the two readers:
load.py (checkpoint files, folders, a rig's sides through their hosts) and live.py (a side's routes file
for status and the pane, re-read only when its checkpoint changed).
"""
