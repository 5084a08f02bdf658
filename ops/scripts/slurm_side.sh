#!/bin/bash
# One side of a carla-console rig as a SLURM batch job (ops/engines/slurm.py submits this file with
# `sbatch ... slurm_side.sh PYTHON RIG SIDE`; arguments, never a script on stdin or built from config).
#   $1 the interpreter that has carla-console   $2 the rig config   $3 the side, or @FILE for a job array
# `exec`: the job's batch step is the console's job-run itself (signals from scancel reach it directly).
set -eu
exec "$1" -m console -c "$2" job-run "$3"
