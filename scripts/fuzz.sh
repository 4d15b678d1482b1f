#!/usr/bin/env bash
# make fuzz: every fuzz target of the module for FUZZTIME each (default 60s), one after
# another, then a summary. A target fails the sweep when it finds an input that breaks it: Go
# writes that input under the package's testdata/fuzz/<Target>/, and once the bug is fixed,
# committing the file makes every `go test` replay it.
#
# Go 1.26's fuzzing coordinator can also end a target that found nothing with "context
# deadline exceeded" at the very end of FUZZTIME, writing no input (go.dev/issue/75804, fixed
# in Go 1.27; seen here on envs/filesearch's FuzzResolve, 2026-12-07, and not again in a rerun).
# Such a target is run once more and fails the sweep only if it ends that way twice.
set -u
go=${GO:-go}
fuzztime=${FUZZTIME:-60s}
failed=()
flaked=()
ran=0

inputs() { ls "$1" 2>/dev/null | sort; }

while read -r pkg dir; do # (the loop's stdin is the package list: the commands below read none of it)
  if ! list=$($go test -list '^Fuzz' "$pkg" </dev/null 2>&1); then
    echo "$list"
    failed+=("$pkg: its tests do not build (go test -list)")
    continue
  fi
  targets=$(echo "$list" | grep '^Fuzz') || continue
  for target in $targets; do
    ran=$((ran + 1))
    for try in 1 2; do
      if [ "$try" = 1 ]; then echo "== $pkg $target"; else echo "== $pkg $target, again"; fi
      corpus="$dir/testdata/fuzz/$target"
      before=$(inputs "$corpus")
      log=$(mktemp)
      $go test "$pkg" -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" -parallel 2 </dev/null 2>&1 |
        tee "$log" | grep --line-buffered -v '^fuzz: elapsed'
      rc=${PIPESTATUS[0]}
      found=$(comm -13 <(echo "$before") <(inputs "$corpus") | grep . || true)
      deadline=0
      grep -q '^    context deadline exceeded$' "$log" && deadline=1
      rm -f "$log"
      if [ "$rc" = 0 ]; then
        break
      fi
      if [ -z "$found" ] && [ "$deadline" = 1 ] && [ "$try" = 1 ]; then
        echo "   (no input written: the coordinator's deadline at the end of FUZZTIME, go.dev/issue/75804; once more)"
        flaked+=("$pkg $target")
        continue
      fi
      if [ -n "$found" ]; then
        failed+=("$pkg $target: new input(s) in $corpus: $(echo $found)")
      else
        failed+=("$pkg $target: exit status $rc")
      fi
      break
    done
  done
done < <($go list -f '{{.ImportPath}} {{.Dir}}' ./...)

echo
echo "fuzz: $ran targets, $fuzztime each; rerun after the deadline's ending with no input: ${#flaked[@]}"
for f in "${flaked[@]}"; do echo "  rerun: $f"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} failed:"
  for f in "${failed[@]}"; do echo "  $f"; done
  exit 1
fi
echo "fuzz: no failures"
