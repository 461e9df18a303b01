#!/bin/bash
# single vs combos: per scenario, arms interleaved by seed; one lock hold per seed (both arms
# back to back, ~12 min), so no hold goes much past 15 min.
# usage: run.sh ENV THRESHOLD [FRAMES] [SEEDS...]
set -u
ENV=$1; T=$2; F=${3:-800000}; shift 3 || shift $#
SEEDS=${*:-1 2}
export PYTHONPATH=/work/wt/doom2/src
cd /work/wt/doom2
NAME=${ENV#Vizdoom}; NAME=${NAME%-v1}
for s in $SEEDS; do
  flock /work/team/cpu.lock bash -c "
    echo \"[\$(date -u +%T)] lock taken; \$(uptime)\"
    for arm in single combos; do
      python benchmarks/time_to_score.py --out /work/runs/doom2/sweep/$NAME-\$arm --seeds $s \
        --threshold $T --max-frames $F --max-minutes 9 --speed-check-s 0 \
        -- gazelle train --env $ENV --doom-actions \$arm --total-frames $F
      echo \"[\$(date -u +%T)] $NAME \$arm seed $s done; \$(uptime)\"
    done
  "
  echo "[$(date -u +%T)] lock released"
done
