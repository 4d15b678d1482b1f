#!/bin/sh
# The pretrained path at real shapes, agrl against PyTorch on the same machine, side by side:
# for each round, agrl's TestLLMThroughput then scripts/bench_llm_peer.py, both at the same
# shape with random weights; one JSON line each. Quote min–max over the rounds.
#
#   scripts/bench_llm.sh [SHAPE] [ROUNDS] [full]   (default smollm2-135m, 3 rounds, LoRA;
#                                                   "full": the train step fine-tunes every weight)
set -eu
shape=${1:-smollm2-135m}
rounds=${2:-3}
mode=${3:-}
full=0
[ "$mode" = full ] && full=1
cd "$(dirname "$0")/.."
grep -m1 'model name' /proc/cpuinfo
# PyTorch (Debian's, installed when missing) runs with OpenBLAS's best kernels for this CPU,
# not those this workplace's OPENBLAS_CORETYPE pins: scripts/torch_peer.py.
/usr/bin/python3 -c 'import sys; sys.path.insert(0, "scripts"); import torch_peer as t; t.ensure_torch(); print("PyTorch with OPENBLAS_CORETYPE=" + t.openblas_coretype())'
GOEXPERIMENT=simd go test -c -o bin/learn-simd.test ./agrl/learn
# The test writes the random model once ($TMPDIR/agrl-bench-SHAPE) and reuses it.
i=1
while [ "$i" -le "$rounds" ]; do
	(cd agrl/learn && AGRL_BENCH_LLM=$shape AGRL_BENCH_FULL=$full ../../bin/learn-simd.test -test.run '^TestLLMThroughput$' -test.count=1 | grep '"impl"')
	/usr/bin/python3 scripts/bench_llm_peer.py "$shape" $mode
	i=$((i + 1))
done
