#!/usr/bin/env bash
# gpu-bundle: build, here, what a GPU machine without a Go toolchain needs to run
# scripts/gpu-check.sh: the test binaries of agrl/learn and agrl/learn/hfgraph (x86-64,
# GOEXPERIMENT=simd, with go-xla's PJRT support; they need only libc and, at run time, a PJRT
# plugin), gzipped into $AGRL_GPU_BUNDLE (default .gpu, ignored by git), about 22 MB.
#
#   scripts/gpu-bundle.sh && ls -l .gpu
#
# Then carry .gpu to the GPU machine and run scripts/device-check.sh there (docs/llm.md,
# "On a GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
out="${AGRL_GPU_BUNDLE:-.gpu}"
mkdir -p "$out"
rm -f "$out"/*.test "$out"/*.test.gz
for pkg in agrl/learn agrl/learn/hfgraph; do
	name=$(basename "$pkg")
	GOOS=linux GOARCH=amd64 GOEXPERIMENT=simd go test -c -o "$out/$name.test" "./$pkg"
	gzip -9 -f "$out/$name.test"
done
git rev-parse HEAD >"$out/COMMIT"
ls -l "$out"
