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
#   scripts/gpu-check.sh               # AGRL_BACKEND defaults to xla:cuda (see TF32 below)
#   AGRL_BACKEND=xla:cuda,preallocate=false scripts/gpu-check.sh
#   GPU_CHECK_STAGES="decode grpo" scripts/gpu-check.sh
#
# TF32: go-xla multiplies float32 matrices in TF32 on CUDA unless told tf32=false, which would
# put float32's agreement tests (1e-4) out of reach; the test stages (tiny, decode, grpo) run on
# xla:cuda,tf32=false, the measurements (bench, shape, shape-bf16) on xla:cuda as users get it.
# AGRL_BACKEND, when set, is used for all.
#
# Stages (GPU_CHECK_STAGES; they run in this order whatever the order given, and an unknown
# name is an error): tiny (the Tiny policy's tests), bench
# (its benchmarks), decode (decoding graph, bfloat16 storage and bfloat16 compute against the
# host and float32), grpo (LoRA GRPO on the tiny Qwen3), shape (the 0.5B shape, float32
# weights), shape-bf16 (the same with bfloat16 weights, then bfloat16 compute too).
#
# Without a Go toolchain (the GPU machines lent to sessions have none) the tests run from the
# test binaries scripts/gpu-bundle.sh builds (AGRL_GPU_BUNDLE, default .gpu), in the packages'
# directories as go test runs them.
#
# The PJRT plugin (pjrt_c_api_cuda_plugin.so) is searched in $PJRT_PLUGIN_LIBRARY_PATH,
# ~/.local/lib/go-xla and /usr/local/lib/go-xla, then as JAX's CUDA plugin
# (site-packages/jax_plugins/xla_cuda*/xla_cuda_plugin.so, with the nvidia libraries of the same
# site-packages), which is laid out under /tmp/agrl-pjrt as go-xla looks for it; agrl never
# downloads one. GPU_CHECK_DRY=1 skips the GPU and plugin checks (to try the script on a CPU
# with AGRL_BACKEND=go).
# Exit status: 0 ok, 1 a test or benchmark failed, 2 no GPU, 3 no PJRT CUDA plugin.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)

backend="${AGRL_BACKEND:-xla:cuda}"
exact="${AGRL_BACKEND:-xla:cuda,tf32=false}" # the test stages' backend
all_stages="tiny bench decode grpo shape shape-bf16"
stages="${GPU_CHECK_STAGES:-$all_stages}"
for s in $stages; do
	if [[ " $all_stages " != *" $s "* ]]; then
		echo "gpu-check: unknown stage $s (stages: $all_stages)" >&2
		exit 1
	fi
done
bundle="${AGRL_GPU_BUNDLE:-$root/.gpu}"
case "$bundle" in /*) ;; *) bundle="$root/$bundle" ;; esac

if [ -z "${GPU_CHECK_DRY:-}" ]; then
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
	if [ -z "$plugin" ] && command -v python3 >/dev/null 2>&1; then
		jax=$(python3 -c '
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
found = [f for d in dirs for f in sorted(glob.glob(os.path.join(d, "jax_plugins", "xla_cuda*", "xla_cuda_plugin.so")))]
print(found[-1] if found else "")' 2>/dev/null)
		if [ -n "$jax" ]; then
			# go-xla finds a plugin by its file name, and the nvidia libraries beside the plugin's
			# directory (<dir>/../nvidia); the plugin's RPATH looks two levels up
			# ($ORIGIN/../../nvidia): link both into that shape.
			site=$(dirname "$(dirname "$(dirname "$jax")")")
			lay=/tmp/agrl-pjrt
			mkdir -p "$lay/jax_plugins/cuda"
			ln -sf "$jax" "$lay/jax_plugins/cuda/pjrt_c_api_cuda_plugin.so"
			if [ -d "$site/nvidia" ]; then
				ln -sfn "$site/nvidia" "$lay/nvidia"
				ln -sfn "$site/nvidia" "$lay/jax_plugins/nvidia"
				for lib in "$site"/nvidia/*/lib; do
					LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
				done
				export LD_LIBRARY_PATH
			fi
			export PJRT_PLUGIN_LIBRARY_PATH="$lay/jax_plugins/cuda"
			plugin="$lay/jax_plugins/cuda/pjrt_c_api_cuda_plugin.so"
			echo "gpu-check: using JAX's CUDA plugin $jax"
		fi
	fi
	if [ -z "$plugin" ]; then
		echo "gpu-check: no PJRT CUDA plugin (pjrt_c_api_cuda_plugin.so) in \$PJRT_PLUGIN_LIBRARY_PATH (${PJRT_PLUGIN_LIBRARY_PATH:-unset}), ~/.local/lib/go-xla or /usr/local/lib/go-xla, and no JAX CUDA plugin" >&2
		exit 3
	fi
	echo "gpu-check: $(nvidia-smi -L | head -1)"
	echo "gpu-check: plugin $plugin, backend $backend (tests: $exact)"
fi
export AGRL_BACKEND="$backend" GOMLX_NO_AUTO_INSTALL=1
status=0
exec 3>&2 # the script's stderr, for messages from inside filtered pipelines

# gotest PKG FLAGS...: go test of ./PKG with FLAGS (each -name or -name=value), or, without a Go
# toolchain, the bundle's PKG test binary run in PKG's directory with -test.-prefixed flags.
gotest() {
	local pkg="$1"
	shift
	if command -v go >/dev/null 2>&1 && [ -z "${GPU_CHECK_BUNDLE_ONLY:-}" ]; then
		go test "$@" "./$pkg/"
		return
	fi
	local name bin
	name=$(basename "$pkg")
	bin="$bundle/$name.test"
	if [ ! -x "$bin" ] && [ -f "$bin.gz" ]; then # unpacked outside the bundle, which must stay small to carry
		mkdir -p /tmp/agrl-gpu-bundle
		bin="/tmp/agrl-gpu-bundle/$name.test"
		if [ ! -x "$bin" ] || [ "$bundle/$name.test.gz" -nt "$bin" ]; then
			gunzip -c "$bundle/$name.test.gz" >"$bin.tmp" && chmod +x "$bin.tmp" && mv "$bin.tmp" "$bin"
		fi
	fi
	if [ ! -x "$bin" ]; then
		echo "gpu-check: no test binary $bin to run (no Go toolchain here, or GPU_CHECK_BUNDLE_ONLY): build the bundle with scripts/gpu-bundle.sh (make gpu-bundle) and carry it" >&3
		return 1
	fi
	local args=() a
	for a in "$@"; do
		args+=("-test.${a#-}")
	done
	(cd "$root/$pkg" && "$bin" "${args[@]}")
}

want() { [[ " $stages " == *" $1 "* ]]; }

# stage PATTERN PKG FLAGS...: run gotest (with -v), show the lines matching PATTERN as they
# come, and fail the check when the tests fail or when a test named in -run=A|B|… did not run
# (a bundle older than the tests asked for runs the others and passes).
stage() {
	local pattern="$1" log a name
	shift
	log=$(mktemp)
	gotest "$@" 2>&1 | tee "$log" | grep -E "$pattern|testing: warning: no tests to run"
	local rc=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] || status=1
	for a in "$@"; do
		case "$a" in -run=*) ;; *) continue ;; esac
		IFS='|' read -ra names <<<"${a#-run=}"
		for name in "${names[@]}"; do
			name=${name#^}
			name=${name%\$}
			if ! grep -qE "^--- (PASS|FAIL|SKIP): $name( |\$)" "$log"; then
				echo "gpu-check: $name did not run (a bundle older than the tests? rebuild it: make gpu-bundle)" >&3
				status=1
			fi
		done
	done
	rm -f "$log"
}
tests='^(=== RUN|--- |PASS|FAIL|ok|panic)|_test.go:'

if { ! command -v go >/dev/null 2>&1 || [ -n "${GPU_CHECK_BUNDLE_ONLY:-}" ]; } && [ -f "$bundle/COMMIT" ]; then
	echo "gpu-check: bundle built at $(cat "$bundle/COMMIT")"
	if head=$(git rev-parse HEAD 2>/dev/null) && [ "$head" != "$(cat "$bundle/COMMIT")" ]; then
		echo "gpu-check: WARNING: the bundle was built at another commit than this tree's ($head): rebuild it (make gpu-bundle)" >&2
	fi
fi

if want tiny; then
	echo "== tests on $exact: sampler/scorer agreement, determinism, rollout, SFT"
	AGRL_BACKEND="$exact" stage "$tests" agrl/learn -count=1 -timeout=15m -v \
		-run='TestSamplerScorerAgreement|TestSamplerDeterminism|TestRolloutUntrained|TestSFTLearnsToolUse'
fi

if want bench; then
	echo "== benchmarks on $backend"
	out=$(gotest agrl/learn -count=1 -timeout=20m -run=XXX -bench='Sample|Train' -benchtime=10x 2>&1) || status=1
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
fi

if want decode; then
	echo "== pretrained path on $exact: the decoding graph against agrl/llm (every family, YaRN too), graph decoding against host decoding, bfloat16 storage and compute"
	HFGRAPH_BACKEND="$exact" stage "$tests" agrl/learn/hfgraph -count=1 -timeout=15m -v \
		-run='TestDecodeMatchesHost|TestLogProbsMatchLLM|TestBF16Storage|TestBF16Compute|TestMatmulBF16'
	AGRL_BACKEND="$exact" stage "$tests" agrl/learn -count=1 -timeout=15m -v \
		-run='TestGraphDecoderMatchesHost|TestPretrainedGraphDecoding|TestPretrainedBF16Weights|TestPretrainedBF16Compute'
fi

if want grpo; then
	echo "== pretrained path on $exact: LoRA GRPO on the tiny Qwen3 checkpoint (rollouts decode on the GPU)"
	AGRL_BACKEND="$exact" stage "$tests" agrl/learn -count=1 -timeout=15m -v -run='TestPretrainedGRPO|TestPretrainedScoreMatchesSampler'
fi

shape="${AGRL_GPU_SHAPE:-qwen2.5-0.5b}"
measure='"impl"|^(--- |FAIL|ok|panic)|_test.go:'
if want shape; then
	echo "== pretrained path on $backend at the $shape shape (random weights): sampling (host, then the decoding graph), scoring and a LoRA step (graphs)"
	GOEXPERIMENT=simd AGRL_BENCH_LLM="$shape" stage "$measure" agrl/learn -count=1 -timeout=30m -run='^TestLLMThroughput$' -v
fi
if want shape-bf16; then
	echo "== the same at the $shape shape with the base weights in bfloat16 on $backend (agrl.PretrainedLM.Weights), then computing in bfloat16 too (Compute)"
	GOEXPERIMENT=simd AGRL_BENCH_LLM="$shape" AGRL_BENCH_WEIGHTS=bfloat16 stage "$measure" agrl/learn -count=1 -timeout=30m -run='^TestLLMThroughput$' -v
	GOEXPERIMENT=simd AGRL_BENCH_LLM="$shape" AGRL_BENCH_WEIGHTS=bfloat16 AGRL_BENCH_COMPUTE=bfloat16 stage "$measure" agrl/learn -count=1 -timeout=30m -run='^TestLLMThroughput$' -v
fi
exit $status
