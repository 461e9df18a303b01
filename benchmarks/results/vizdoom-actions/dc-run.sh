#!/bin/bash
# Issue 51: DefendCenter, --doom-actions single vs combos, seeds 1-2 interleaved by seed, one sitting.
while pgrep -f "mujoco1m/(hc|ho)" >/dev/null || pgrep -f "^/bin/bash ./run.sh" -P 1 | grep -q 19428; do sleep 20; done
cd /work/main
export PYTHONPATH=/work/runs/main/defend/src_frozen
for SEED in 1 2; do
  for ARM in single combos; do
    flock /work/team/cpu.lock python benchmarks/time_to_score.py --out /work/runs/main/defend/DefendCenter-$ARM --seeds $SEED --threshold 8 \
      --max-frames 1500000 --max-minutes 16 --speed-check-s 0 \
      -- gazelle train --env VizdoomDefendCenter-v1 --doom-actions $ARM --total-frames 1500000
  done
done
