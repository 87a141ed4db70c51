// Package nativecli holds what the harnesses that drive a native agent CLI
// (harness/codex, the Codex app-server; harness/claude, Claude Code) share,
// apart from their protocols:
//
//   - settings: strict decoding of a harness entry's settings, the
//     project-local binary lookup and its check, the environment a CLI
//     process gets (an allow-list of the worker's variables, never the
//     worker's own settings or credentials), environment variable names;
//   - versions: major.minor.patch with pre-releases, and their order;
//   - processes: a process group of its own (killed as a whole, and on
//     Linux with the worker), and the CLI's stderr logged a line at a time;
//   - errors: the *teamster.Error of a failed, cancelled or timed-out
//     attempt, each message starting with the harness's prefix ("codex: ");
//   - a turn's side of the Host contract (Relay): events, usage, the turn's
//     first failure, and the tool-call relay (Host.Tool, a tool event, then
//     Host.ToolTerminal, whose lastToolError the outcome keeps);
//   - injection: the V1 and V2 handles of a turn (Steerer), which write
//     each item one at a time behind the run's own check and the host's
//     assertion, leaving the write and its settlement to the harness.
//
// What a CLI speaks (JSON-RPC over stdio, stream-json lines, MCP) stays in
// its harness's package.
package nativecli
