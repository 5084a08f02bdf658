"""Results and planning over Bench2Drive checkpoints and routes files: merged scores by Bench2Drive's
rules, per-ability success, ETA by town, the fake-success check, balanced splits and paired comparison.

Pure: no Textual, no process or host access; callers hand in parsed files and get frozen values back.
"""
