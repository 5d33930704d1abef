#!/usr/bin/env bash
# The GPU check: the CUDA tests, `bench policy`, `bench system` and `bench env-train` with the learner and the
# inference actor on one GPU, in one run of about six minutes (an H200). Run from the repository root on a machine with CUDA
# and this project's dependencies importable (`python3 -m five_actors` must work; where they are not installed,
# wheels of the missing ones in .whl/ are installed under /tmp/site first). Each step's output goes to
# $OUT/<step>.log (default OUT: runs/gpu-check) and its last lines to stdout.
#
#   scripts/gpu-check.sh                    # on the GPU
#   GPU=cpu SYSTEM_S=20 TRAIN_MIN=1 GAME_ACTORS=2 PYTHON=.venv/bin/python scripts/gpu-check.sh   # on the CPU, shorter
#
# One GPU: one learner (NCCL will not put two ranks of a group on one device), the inference actor beside it on the
# same device; the game actors and the eval stay on the CPU cores.
set -u
GPU=${GPU:-cuda}
SYSTEM_S=${SYSTEM_S:-30}
TRAIN_MIN=${TRAIN_MIN:-2}
GAME_ACTORS=${GAME_ACTORS:-8}
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/five-actors-numba}
PYTHON=${PYTHON:-python3}
if [ -d .whl ] && ! "$PYTHON" -c "import orjson, structlog, trueskill, gymnasium" 2>/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [ "$GPU" = cpu ]; then child=cpu; else child=cuda:0; fi

step() {  # step NAME SECONDS COMMAND...: run it under a time limit, keep its output, show its end
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    timeout -s INT -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? at $(date -u +%T)"
    tail -n "${TAIL:-20}" "$OUT/$name.log"
}

# The bundled configs with the learner and inference children on the GPU.
conf=$("$PYTHON" -c "import five_actors, pathlib; print(pathlib.Path(five_actors.__file__).parent / 'conf')")
sed "s/^device = \"cpu\"/device = \"$child\"/" "$conf/default.toml" >"$OUT/gpu-default.toml"
sed -e "/^id = \"learner\"/a device = \"$child\"" -e "/^id = \"inference\"/a device = \"$child\"" \
    "$conf/cartpole.toml" >"$OUT/gpu-cartpole.toml"

step machine 30 bash -c "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv; nproc; \
    $PYTHON -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available(), \
    torch.cuda.get_device_name() if torch.cuda.is_available() else \"-\")'"
if [ "$GPU" != cpu ] && ! "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "gpu-check: torch finds no CUDA GPU here (GPU=$GPU); GPU=cpu runs the steps on the CPU" >&2
    exit 2
fi
FIVE_ACTORS_TEST_DEVICE=$GPU step tests 90 "$PYTHON" -m pytest -q -p no:cacheprovider tests/model/test_cuda.py
step policy 90 bash -c "for p in fp32 bf16; do for size in '--rows 320 --chunks 64' '--rows 8192 --chunks 1024'; do \
    $PYTHON -m five_actors bench policy --seconds 3 \$size --set model.device=$GPU --set model.precision=\$p; done; done"
step system $((SYSTEM_S * 2 + 150)) "$PYTHON" -m five_actors bench system --config "$OUT/gpu-default.toml" \
    --seconds "$SYSTEM_S" --repeats 1 --set model.device=$GPU --set tree.counts.learners=1 \
    --set tree.counts.game_actors="$GAME_ACTORS"
# Sample Factory's CartPole network (README, "Other environments"), 64 copies a game actor, the state held.
step env-train $((TRAIN_MIN * 60 + 60)) "$PYTHON" -m five_actors bench env-train --env gymnasium:CartPole-v1 \
    --config "$OUT/gpu-cartpole.toml" --minutes "$TRAIN_MIN" --seeds 1 --set model.device=$GPU \
    --set model.core=lstm --set model.entity_hidden=512 --set model.entity_embed=512 --set model.core_input=512 \
    --set model.lstm_size=512 --set model.precision=bf16 --set training.games_per_actor=64 \
    --set training.inference_batch_rows=64 --set training.minibatch_chunks=64 --set training.buffer_chunks=256 \
    --set training.publish_every=2 --set training.max_sample_reuse=2 --set training.eval_every_s=60 \
    --set training.max_outstanding_chunks=128
