#!/usr/bin/env bash
# gpu-check: on a machine with an NVIDIA GPU and a PJRT CUDA plugin, run the policy's short
# SFT and sampling tests on xla:cuda, then its benchmarks, and print a table; then the
# pretrained path: the KV-cache decoding graph against agrl/llm's forward pass, graph decoding
# against host decoding, LoRA GRPO end to end on the tiny Qwen3 checkpoint with its rollouts
# decoding on the GPU (scorer against sampler, resume bit-exact) and, on a generated
# checkpoint of the Qwen2.5-0.5B shape (random weights), sampling (host and graph), graph
# scoring and a LoRA training step (AGRL_GPU_SHAPE picks another shape), with the base weights in
# float32 and then in bfloat16 (their storage tested against float32 first).
#
#   scripts/gpu-check.sh               # AGRL_BACKEND defaults to xla:cuda
#   AGRL_BACKEND=xla:cuda,preallocate=false scripts/gpu-check.sh
#
# The PJRT plugin (pjrt_c_api_cuda_plugin.so) is searched in $PJRT_PLUGIN_LIBRARY_PATH,
# ~/.local/lib/go-xla and /usr/local/lib/go-xla; agrl never downloads one.
# Exit status: 0 ok, 1 a test or benchmark failed, 2 no GPU, 3 no PJRT CUDA plugin.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

backend="${AGRL_BACKEND:-xla:cuda}"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu-check: no NVIDIA GPU here (nvidia-smi is missing or lists no device); nothing to check" >&2
	exit 2
fi

plugin=""
IFS=: read -ra dirs <<<"${PJRT_PLUGIN_LIBRARY_PATH:-}"
for d in "${dirs[@]}" "$HOME/.local/lib/go-xla" "$HOME/.local/lib/go-xla/nvidia" /usr/local/lib/go-xla /usr/local/lib/go-xla/nvidia; do
	[ -n "$d" ] || continue
	for f in "$d"/pjrt_c_api_cuda_plugin.so "$d"/pjrt-plugin-cuda*.so "$d"/pjrt_plugin_cuda*.so; do
		if [ -f "$f" ]; then
			plugin="$f"
			break 2
		fi
	done
done
if [ -z "$plugin" ]; then
	echo "gpu-check: no PJRT CUDA plugin (pjrt_c_api_cuda_plugin.so) in \$PJRT_PLUGIN_LIBRARY_PATH (${PJRT_PLUGIN_LIBRARY_PATH:-unset}), ~/.local/lib/go-xla or /usr/local/lib/go-xla" >&2
	exit 3
fi

echo "gpu-check: $(nvidia-smi -L | head -1)"
echo "gpu-check: plugin $plugin, backend $backend"
export AGRL_BACKEND="$backend" GOMLX_NO_AUTO_INSTALL=1
status=0

echo "== tests on $backend: sampler/scorer agreement, determinism, rollout, SFT"
go test -count=1 -timeout 15m -v \
	-run 'TestSamplerScorerAgreement|TestSamplerDeterminism|TestRolloutUntrained|TestSFTLearnsToolUse' \
	./agrl/learn/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go:' || true
if ! go test -count=1 -timeout 15m -run 'TestSamplerScorerAgreement|TestSamplerDeterminism|TestRolloutUntrained|TestSFTLearnsToolUse' ./agrl/learn/ >/dev/null 2>&1; then
	echo "gpu-check: tests FAILED on $backend" >&2
	status=1
fi

echo "== benchmarks on $backend"
out=$(go test -count=1 -timeout 20m -run XXX -bench 'Sample|Train' -benchtime 10x ./agrl/learn/ 2>&1)
echo "$out" | grep -E '^(Benchmark|--- SKIP|FAIL|panic)' || true
if echo "$out" | grep -qE '^(FAIL|panic)'; then
	echo "$out" | tail -20 >&2
	status=1
fi
echo
printf '%-24s %14s %12s %10s\n' benchmark tokens/s GFLOP/s ms/op
echo "$out" | awk '/^Benchmark/ {
	name=$1; ns=""; tps=""; gf="";
	for (i = 2; i < NF; i++) {
		if ($(i+1) == "ns/op") ns = $i;
		if ($(i+1) == "tokens/s") tps = $i;
		if ($(i+1) == "GFLOP/s") gf = $i;
	}
	printf "%-24s %14.0f %12.1f %10.1f\n", name, tps, gf, ns/1e6
}'

echo "== pretrained path on $backend: the decoding graph against agrl/llm (every family), graph decoding against host decoding"
if ! HFGRAPH_BACKEND="$backend" go test -count=1 -timeout 15m -v -run 'TestDecodeMatchesHost|TestBF16Storage' ./agrl/learn/hfgraph/ 2>&1 |
	grep -E '^(--- |PASS|FAIL|ok|panic)|_test.go:'; then
	status=1
fi
if ! go test -count=1 -timeout 15m -v -run 'TestGraphDecoderMatchesHost|TestPretrainedGraphDecoding|TestPretrainedBF16Weights' ./agrl/learn/ 2>&1 |
	grep -E '^(--- |PASS|FAIL|ok|panic)|_test.go:'; then
	status=1
fi
echo "== pretrained path on $backend: LoRA GRPO on the tiny Qwen3 checkpoint (rollouts decode on $backend)"
if ! go test -count=1 -timeout 15m -v -run 'TestPretrainedGRPO|TestPretrainedScoreMatchesSampler' ./agrl/learn/ 2>&1 |
	grep -E '^(--- |PASS|FAIL|ok|panic)|_test.go:'; then
	status=1
fi
shape="${AGRL_GPU_SHAPE:-qwen2.5-0.5b}"
echo "== pretrained path on $backend at the $shape shape (random weights): sampling (host, then the decoding graph), scoring and a LoRA step (graphs)"
if ! (cd agrl/learn && AGRL_BENCH_LLM="$shape" GOEXPERIMENT=simd go test -count=1 -timeout 30m -run '^TestLLMThroughput$' -v . 2>&1 |
	grep -E '"impl"|^(--- |FAIL|ok|panic)|_test.go:'); then
	status=1
fi
echo "== the same at the $shape shape with the base weights in bfloat16 on $backend (agrl.PretrainedLM.Weights)"
if ! (cd agrl/learn && AGRL_BENCH_LLM="$shape" AGRL_BENCH_WEIGHTS=bfloat16 GOEXPERIMENT=simd go test -count=1 -timeout 30m -run '^TestLLMThroughput$' -v . 2>&1 |
	grep -E '"impl"|^(--- |FAIL|ok|panic)|_test.go:'); then
	status=1
fi
exit $status
