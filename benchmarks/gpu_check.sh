#!/usr/bin/env bash
# The GPU check of docs/performance.md, as one prepared script of at most ~9 minutes.
#
# On a machine with an NVIDIA GPU and torch already installed (no network needed): the CUDA
# tests, then `gazelle bench` with central inference on the GPU and actors on every core but
# one: the deep torso (bf16) at the default batch, at B=32 with one env group per actor and
# with two, and with the LSTM (its input normed), each for SECS seconds (default 60). Each
# bench prints its table and one JSON line; `env_efficiency` (training fps over every core
# stepping Pong alone) is the figure the GPU check is judged by (aim: >= 0.6; the first run,
# docs/performance.md, reached 0.37).
# Last, the learners alone (`--learners N`, issue 55): learner samples/s of the deep torso
# (bf16, B=32) for N = 1..k, one GPU each (NCCL between them), k = the GPUs there are.
#
# Missing Python packages travel as wheels in .whl/ (see docs/performance.md, "GPU check"):
#   bash benchmarks/gpu_check.sh            # logs to $OUT (or ./gpu_check_out)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:${PYTHONPATH:-}
CORES=$(nproc)
ACTORS=$((CORES > 2 ? CORES - 1 : 1))
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
    echo "cores $CORES, actors $ACTORS"
} 2>&1 | tee "$OUT/machine.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_cuda.py tests/test_vtrace.py \
    -k "cuda or gpu" 2>&1 | tail -8 | tee "$OUT/tests.txt"
SECS=${SECS:-60}
# deep bf16 at the default batch (B=8), then at B=32: on a GPU the learner's batch costs
# little, so the larger batch shows whether B=8 leaves the GPU idle. B=32 runs with each
# actor's envs in one group (every step waits for the server's answer with the envs idle)
# and in the default two (one steps while the other's request is served; docs/performance.md,
# "Env groups"). Last, the seed's deep + LSTM agent with the core's input normed: on the
# first check the plain one stopped learning at update 500 (docs/notes/lstm.md, "The deep
# LSTM's stall"); a saturated core now warns, so its absence in the log is the check.
for run in "deep bf16 8 2 no" "deep bf16 32 1 no" "deep bf16 32 2 no" "deep bf16 32 2 yes"; do
    read -r torso precision batch groups lstm <<<"$run"
    memory=(--no-use-lstm)
    [ "$lstm" = yes ] && memory=(--use-lstm --core-input-norm)
    timeout $((SECS + 100)) python3 -m gazelle.cli bench --model "$torso" --device cuda \
        --inference central --num-actors "$ACTORS" --envs-per-actor 32 --precision "$precision" \
        --batch-size "$batch" --env-groups "$groups" "${memory[@]}" --seconds "$SECS" \
        --part-seconds 3 2>&1 | grep -v '^frames' \
        | tee "$OUT/bench_${torso}_b${batch}_g${groups}_lstm-${lstm}.txt"
done
GPUS=$(python3 -c "import torch; print(torch.cuda.device_count())")
if [ "${GPUS:-0}" -ge 1 ]; then
    timeout $((40 * GPUS + 60)) python3 benchmarks/learners.py --env PongNoFrameskip-v4 \
        --model deep --precision bf16 --device cuda --batch-size 32 --seconds 15 \
        --learners $(seq 1 "$GPUS") 2>&1 | grep -v '^gazelle:' | tee "$OUT/learners.txt"
fi
