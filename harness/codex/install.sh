#!/bin/sh
# Installs the pinned @openai/codex into the project-local folder the codex
# harness looks in by default (.tools/codex), when it is not there yet, and
# links the native binary of this platform at .tools/codex/bin/codex.
# Idempotent: an install of the pinned version is left alone (no network).
#
# Environment:
#   CODEX_VERSION    the version to install (default: the pinned one below)
#   CODEX_TOOLS_DIR  where to install (default: <project>/.tools/codex)
#
# The pin must match PinnedVersion in harness/codex/settings.go.
set -eu

CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="${CODEX_TOOLS_DIR:-$root/.tools/codex}"
bin="$dest/bin/codex"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null || true)" = "codex-cli $CODEX_VERSION" ]; then
	echo "codex: @openai/codex $CODEX_VERSION is installed ($bin)"
	exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
	echo "codex: npm is required to install @openai/codex $CODEX_VERSION (install Node.js 18 or newer)" >&2
	exit 1
fi

echo "codex: installing @openai/codex $CODEX_VERSION into $dest"
mkdir -p "$dest"
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error --save-exact "@openai/codex@$CODEX_VERSION"

# The npm package's launcher (bin/codex.js) is a Node script that execs the
# native binary from the optional platform package; the harness runs the
# native binary itself, so that it owns the process it signals and kills.
native=$(find "$dest/node_modules/@openai" -path '*/vendor/*/bin/codex' -type f 2>/dev/null | head -n 1)
if [ -z "$native" ]; then
	echo "codex: no native codex binary for this platform under $dest/node_modules/@openai" >&2
	exit 1
fi
mkdir -p "$dest/bin"
ln -sf "../${native#"$dest"/}" "$bin" # relative: the folder may move

got=$("$bin" --version 2>/dev/null || true)
if [ "$got" != "codex-cli $CODEX_VERSION" ]; then
	echo "codex: $bin reports \"$got\", expected \"codex-cli $CODEX_VERSION\"" >&2
	exit 1
fi
echo "codex: installed $got at $bin"
