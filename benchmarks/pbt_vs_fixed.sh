#!/usr/bin/env bash
# Issue 55, deliverable 5: does PBT help? A population of 4 against 4 fixed runs with the
# same frames in all, both started from the same deliberately spread learning rates, on a
# ViZDoom scenario (APPO, the ViZDoom default), in one sitting of about an hour on a 2-core
# machine (DefendCenter trains at ~2,500 frames/s there: docs/results.md, Z4).
#
# Both arms run through `gazelle tune` with the same members, segments and restarts, so the
# only difference is PBT itself: the fixed arm has --quantile 0 (no member ever copies
# another, nothing is explored: four independent runs at their starting values). Each arm
# writes OUT/<arm>/summary.md; the last lines print the best and the median member of each
# (the objective: the recent mean return over 100 episodes at the member's last report).
#
#   flock /work/team/cpu.lock bash benchmarks/pbt_vs_fixed.sh        # OUT=runs/pbt-vs-fixed
#   FRAMES=200000 INTERVAL=20000 bash benchmarks/pbt_vs_fixed.sh     # a quick look
#
# Needs pip install -e '.[tune,doom]'. Run once, 2026-12-07: docs/tune.md, "PBT against fixed
# hyperparameters" (the summaries in benchmarks/results/pbt-vs-fixed/).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
OUT=${OUT:-runs/pbt-vs-fixed}
ENV_ID=${ENV_ID:-VizdoomDefendCenter-v1}
FRAMES=${FRAMES:-1000000}      # per member: 4M frames per arm
INTERVAL=${INTERVAL:-100000}
SEED=${SEED:-1}
mkdir -p "$OUT"
common=(--env "$ENV_ID" --population 4 --frames "$FRAMES" --interval "$INTERVAL"
        --mutate learning_rate=3e-5:1e-2 --start learning_rate=1e-4,3e-4,1e-3,3e-3
        --num-actors 1 --member-cpus 0.5 --seed "$SEED" --tune-seed "$SEED" --quiet)
for arm in pbt fixed; do
    extra=()
    [ "$arm" = fixed ] && extra=(--quantile 0)
    echo "== $arm: gazelle tune ${common[*]} ${extra[*]} --out $OUT/$arm"
    python -m gazelle.cli tune "${common[@]}" "${extra[@]}" --out "$OUT/$arm" \
        > "$OUT-$arm.log" 2>&1 || echo "$arm: gazelle tune exited $? (see $OUT-$arm.log)"
done
python - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for arm in ("pbt", "fixed"):
    path = out / arm / "summary.json"
    if not path.is_file():
        print(f"{arm}: no summary ({path})")
        continue
    s = json.loads(path.read_text())
    scores = {n: m["objective"] for n, m in s["members"].items()}
    best = s["best"] or {}
    print(f"{arm}: best {best.get('member')} {best.get('objective')}, median {s['median']}, "
          f"scored {s['scored']}, exploits {s['exploits']}; per member {scores}")
PY
