#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A SLURM batch job whose nodes share one coordfs cache (coordfs(1), PEERS).
# One coordfs per node, started by its own job step, finds the job's nodes
# itself (--peers=slurm: SLURM_JOB_NODELIST and SLURM_NODEID). A step's
# processes are killed when the step ends, so coordfs runs in the
# foreground of a step that lasts as long as the training: `srun ... &`,
# then the training step, then the mount is unmounted on every node.
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
set -euo pipefail

DATA=${DATA:-/data/imagenet}     # SOURCE: shared file system or s3://bucket/prefix
MNT=${MNT:-/tmp/coordfs-$SLURM_JOB_ID}
SECRET=${SECRET:-$HOME/.coordfs.secret}   # chmod 600, the same on every node

srun --ntasks-per-node=1 mkdir -p "$MNT"
# The cache step: stays in the foreground (-f) for the job's life.
srun --ntasks-per-node=1 --overlap coordfs -f --peers=slurm --peer-port=7079 \
	--secret-file="$SECRET" --cache-size=40% "$DATA" "$MNT" &
cache_step=$!
# Wait until every node's mount is up.
srun --ntasks-per-node=1 --overlap bash -c \
	'for i in $(seq 100); do mountpoint -q "$0" && exit 0; sleep 0.2; done; exit 1' "$MNT"

srun --ntasks-per-node=1 --overlap python3 train.py --data "$MNT/train"

srun --ntasks-per-node=1 --overlap fusermount3 -u "$MNT"
wait "$cache_step"
