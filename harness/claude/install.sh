#!/bin/sh
# Installs the pinned @anthropic-ai/claude-code into the project-local folder
# the claude harness looks in by default (.tools/claude), when it is not there
# yet, and links the native binary of this platform at
# .tools/claude/bin/claude. Idempotent: an install of the pinned version is
# left alone (no network).
#
# Environment:
#   CLAUDE_VERSION    the version to install (default: the pinned one below)
#   CLAUDE_TOOLS_DIR  where to install (default: <project>/.tools/claude)
#
# The pin must match PinnedVersion in harness/claude/settings.go.
set -eu

CLAUDE_VERSION="${CLAUDE_VERSION:-2.1.328}"
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="${CLAUDE_TOOLS_DIR:-$root/.tools/claude}"
bin="$dest/bin/claude"
want="$CLAUDE_VERSION (Claude Code)"

if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null || true)" = "$want" ]; then
	echo "claude: @anthropic-ai/claude-code $CLAUDE_VERSION is installed ($bin)"
	exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
	echo "claude: npm is required to install @anthropic-ai/claude-code $CLAUDE_VERSION (install Node.js 18 or newer)" >&2
	exit 1
fi

echo "claude: installing @anthropic-ai/claude-code $CLAUDE_VERSION into $dest"
mkdir -p "$dest"
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error --save-exact "@anthropic-ai/claude-code@$CLAUDE_VERSION"

# The npm package's launcher is a Node script that runs the native binary
# from the optional platform package (@anthropic-ai/claude-code-<os>-<arch>);
# the harness runs the native binary itself, so that it owns the process it
# signals and kills.
native=$(find "$dest/node_modules/@anthropic-ai" -path '*/claude-code-*/claude' -type f 2>/dev/null | head -n 1)
if [ -z "$native" ]; then
	echo "claude: no native claude binary for this platform under $dest/node_modules/@anthropic-ai" >&2
	exit 1
fi
mkdir -p "$dest/bin"
ln -sf "../${native#"$dest"/}" "$bin" # relative: the folder may move

got=$("$bin" --version 2>/dev/null || true)
if [ "$got" != "$want" ]; then
	echo "claude: $bin reports \"$got\", expected \"$want\"" >&2
	exit 1
fi
echo "claude: installed $got at $bin"
