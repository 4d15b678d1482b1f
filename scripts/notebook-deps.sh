#!/usr/bin/env bash
# Installs what the notebooks need, idempotently: Jupyter from Debian's packages, the GoNB kernel
# and goimports built from pinned versions into $TOOLS (default: .tools/bin in the repo), and the
# GoNB kernel spec. Safe to run again: each step is skipped when its result is already there.
# GOPLS=1 also builds gopls (autocompletion and docs in Jupyter; about 2.5 min on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
GONB_VERSION=v0.11.4
GOIMPORTS_VERSION=v0.47.0
GOPLS_VERSION=v0.23.0 # v0.24.0 needs Go 1.27
TOOLS=${TOOLS:-$PWD/.tools/bin}
mkdir -p "$TOOLS"

# Debian's system Jupyter (the first python3 on PATH may be a pyenv without Jupyter).
if ! /usr/bin/python3 -c 'import nbclient, nbconvert, nbformat, jupyter_client, notebook' 2>/dev/null || ! [ -x /usr/bin/jupyter ]; then
  echo "notebook-deps: installing Jupyter from Debian's packages"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    jupyter-nbconvert jupyter-client python3-nbclient python3-ipykernel jupyter-notebook >/dev/null
fi

# gonb and goimports: `go install pkg@version` is refused by the module proxy for gonb, so build
# them from a throw-away module that pins them as tools.
build_tool() { # name module version
  local name=$1 mod=$2 ver=$3
  if [ -x "$TOOLS/$name" ] && [ -f "$TOOLS/.$name.version" ] && [ "$(cat "$TOOLS/.$name.version")" = "$ver" ]; then
    return
  fi
  echo "notebook-deps: building $name $ver"
  local tmp; tmp=$(mktemp -d)
  (cd "$tmp" && go mod init tools.local >/dev/null 2>&1 && go get -tool "$mod@$ver" >/dev/null && go build -o "$TOOLS/" "$mod")
  rm -rf "$tmp"
  echo "$ver" > "$TOOLS/.$name.version"
}
build_tool gonb github.com/janpfeifer/gonb "$GONB_VERSION"
build_tool goimports golang.org/x/tools/cmd/goimports "$GOIMPORTS_VERSION"
if [ "${GOPLS:-}" = 1 ]; then
  build_tool gopls golang.org/x/tools/gopls "$GOPLS_VERSION"
fi

# The kernel spec points at the gonb binary's absolute path: the whole quoted path must match
# (a spec left by a checkout at /other/work/main contains this checkout's path as a substring).
export PATH="$TOOLS:$PATH"
kdir=$(/usr/bin/jupyter --data-dir)/kernels/gonb
if ! [ -f "$kdir/kernel.json" ] || ! grep -qF "\"$TOOLS/gonb\"" "$kdir/kernel.json"; then
  echo "notebook-deps: installing the GoNB kernel spec"
  gonb --install --raw_error --force_deps --logtostderr=false
fi
echo "notebook-deps: ready (gonb $GONB_VERSION, goimports $GOIMPORTS_VERSION, kernel spec in $kdir)"
