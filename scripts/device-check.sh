#!/usr/bin/env bash
# device-check: the one command a session lent a GPU machine runs there (no Go, no network):
# first scripts/transformers_check.py (agrl's test checkpoints against transformers and PEFT,
# which that machine has), then scripts/gpu-check.sh from the test binaries of
# scripts/gpu-bundle.sh (carried as .gpu). Logs and the transformers summary go to $OUT (the
# device tool's output folder) or, without it, to /tmp/agrl-device.
#
#   scripts/gpu-bundle.sh                      # here, first
#   (device) bash scripts/device-check.sh      # carry .gpu; GPU_CHECK_STAGES picks stages
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-/tmp/agrl-device}"
mkdir -p "$out"
{
	status=0
	echo "device-check: $(date -u +%FT%TZ), bundle built at $(cat .gpu/COMMIT 2>/dev/null || echo '?'), tree at $(git rev-parse HEAD 2>/dev/null || echo '?')"
	grep -m1 'model name' /proc/cpuinfo
	nvidia-smi -L 2>&1 | head -2
	echo "== transformers and PEFT on agrl's test checkpoints"
	PYTHONUNBUFFERED=1 timeout 240 python3 scripts/transformers_check.py --out "$out/transformers-check.json" || status=1
	echo "== gpu-check (stages: ${GPU_CHECK_STAGES:-all})"
	GPU_CHECK_BUNDLE_ONLY=1 scripts/gpu-check.sh || status=1
	echo "device-check: exit $status"
	exit $status
} 2>&1 | tee "$out/device-check.log"
exit "${PIPESTATUS[0]}"
