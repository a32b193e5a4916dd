#!/bin/bash
# Before/after A/B of two checkouts of this repository on the same machine: each bench of BENCHES at
# SCALE, ROUNDS rounds interleaved (before after / after before / ...), so a drift of the machine's load
# falls on both sides. Results: OUT/before/*.json and OUT/after/*.json; compare medians (bench/README).
#
#   bench/ab.sh BEFORE_TREE AFTER_TREE OUT [ROUNDS=3] [SCALE=smoke]
#
# BEFORE_TREE, AFTER_TREE: e.g. `git worktree add --detach /tmp/before <commit>`. Each runs with its own
# tree first on PYTHONPATH and this checkout's .venv (the trees must need the same packages).
set -u
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath -m "$3"); rounds=${4:-3}; scale=${5:-smoke}
python="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"  # not resolved: a venv python is a link
BENCHES=${BENCHES:-"coordinator smallparents overhead longtail"}
mkdir -p "$out/before" "$out/after"
run() {  # side tree
  for bench in $BENCHES; do
    extra=""; [ "$bench" = longtail ] && extra="--no-daft"
    echo "$(date +%T) $1 $bench"
    (cd "$2" && PYTHONPATH="$2" timeout 1800 "$python" -m bench "$bench" --scale "$scale" \
        --out "$out/$1" $extra > "$out/$1/$bench.log" 2>&1) || echo "  failed: $out/$1/$bench.log"
  done
}
for round in $(seq 1 "$rounds"); do
  if [ $((round % 2)) = 1 ]; then run before "$before"; run after "$after"
  else run after "$after"; run before "$before"; fi
done
echo "done $(date +%T)"
