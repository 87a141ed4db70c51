// Package claude is teamster's Claude Code harness: it runs each attempt as
// one turn of the Claude Code CLI (`claude`, the native binary of the npm
// package @anthropic-ai/claude-code, whose platform build is the optional
// dependency @anthropic-ai/claude-code-linux-x64), driven by the worker that
// claimed the attempt. The protocol below is as observed from the real
// 2.1.328 binary (PinnedVersion) against a local Messages endpoint
// (claudetest).
//
// # One process per turn
//
// Each attempt starts its own process and the process ends with the turn:
//
//	claude -p --input-format stream-json --output-format stream-json --verbose
//	  --include-partial-messages --replay-user-messages --permission-prompts none
//	  --model <model> --permission-mode dontAsk --tools <builtins>
//	  [--allowedTools <builtins>,mcp__teamster__<tool>,...]
//	  --strict-mcp-config [--mcp-config <file>] [--max-turns N]
//	  (--session-id <new uuid> | --resume <sessionId>)
//
// Why not one warm process per session: the CLI's state between turns is
// its transcript on disk, and --resume loads it in well under a second (a
// whole text turn, process start to exit, takes about 0.6 s here), so a warm
// process would buy little and cost much: a process per idle session, which
// would have to be told apart from a stale one when the session's next turn
// lands on another worker (the transcript moves with ExportState and
// ImportState, a process cannot), and each turn's tools, model, key and
// permission flags would be fixed when the process started. A process per
// turn has none of that, and a crash or a kill ends exactly one turn.
//
// The process runs in its own process group (killed as a whole; on Linux it
// also dies with the worker, Pdeathsig) with HOME set to the harness's home
// and the working directory to its cwd.
//
// # stream-json
//
// The harness writes lines on stdin and reads one JSON object per line on
// stdout:
//   - in: the prompt as {"type":"user","message":{"role":"user","content":
//     [{"type":"text","text":...}]},"parent_tool_use_id":null,"uuid":<uuid>}.
//     stdin stays open while the turn runs (steering, the interrupt) and is
//     closed when the turn is over; the CLI then exits (status 0).
//   - out: {"type":"system","subtype":"init","session_id",...,"tools",
//     "claude_code_version":"2.1.328"} once per pass over the input;
//     {"type":"system","subtype":"status","status":"requesting"} before a
//     model request; {"type":"stream_event","event":{...}} relaying every
//     Messages API stream event (message_start, content_block_start/delta/
//     stop, message_delta, message_stop) with parent_tool_use_id (null for
//     the main conversation); {"type":"assistant","message":{"id":"msg_...",
//     "content":[<one block>]}} for each completed content block (text,
//     thinking, tool_use), several lines per response; {"type":"user",...}
//     for tool results and (isReplay) the echo of each line written;
//     {"type":"command_lifecycle","command_uuid":<uuid written>,"state":
//     queued|started|completed|cancelled} for each line written (with
//     --replay-user-messages); and {"type":"result","subtype":"success"|
//     "error_during_execution"|...,"is_error","session_id","result",
//     "errors","terminal_reason","queued_turn_count"} at the end of each
//     pass.
//
// The turn is over at a successful result with queued_turn_count 0 once
// every line written has been "started" (taken into the conversation): then,
// under the write lock (so no steer slips in), stdin is closed and the
// process exits. A result with is_error ends the turn harness_failed (the
// process is killed). A session the CLI cannot resume answers a result
// "No conversation found with session ID: ..." without an init line: the
// attempt ends harness_failed with sideEffects none, never silently on a new
// session.
//
// Text deltas (stream_event content_block_delta text_delta of the main
// conversation) are partial events {text, itemId: <message id>}; each text
// block of an assistant line is an assistant text; each thinking block is an
// agent event {kind: "reasoning", text} and the outcome's reasoning text, so
// a turn without visible text is classified as codex's are (reasoning-only,
// empty). Note: after a response without visible output, 2.1.328 asks the
// model once more by itself ("[Your previous response had no visible output.
// Please continue and produce a user-visible response.]"), so such a turn
// makes two requests. Tool events are emitted for the gateway's tools (below);
// Claude's built-in tools are the CLI's own business, as codex's are.
//
// # Usage
//
// Each completed model response is reported once through Host.ReportUsage
// with its message id (msg_...) and its output tokens: message_start starts
// a response, message_delta carries its cumulative output tokens, and
// message_stop completes it (usageMeter). A response abandoned mid-stream
// (interrupt) is not reported.
//
// # Resume and native state
//
// A new session gets a fresh UUID as --session-id; the init line confirms it
// (when it names another id, that one is bound). A successful turn returns
// {"sessionId": "<uuid>"} as Outcome.NativeSession. The next turn (Run.Binding
// set) passes --resume <sessionId>; in 2.1.328 a resumed session keeps its id
// (no --fork-session), so the binding does not change from turn to turn.
//
// The CLI keeps the session's transcript at HOME/.claude/projects/<escaped
// cwd>/<sessionId>.jsonl (the cwd with "/" as "-"), and --resume needs only
// that file: it finds it by id under any project directory (a worker whose
// cwd differs resumes it too, and appends to it where it lies). ExportState
// packs it (and the session's side directory <sessionId>/ when tools left
// files there), paths relative to HOME; ImportState unpacks it under this
// harness's home, refusing anything outside .claude/projects. Reset deletes
// the local copy.
//
// # Injection
//
// The run installs a V2 handle (manifest injection "v2"; V1 for "v1").
// Steered input is a user line with priority "next", written to the running
// process's stdin with the assertion called immediately before the write;
// see steer.go for why that write is the final dispatch point and for the
// settlement of each item (committed on the CLI's command_lifecycle
// "started"). Observed: a line written while a response streams is taken in
// at the turn's next model request (after that response's tool results, as a
// system-reminder "The user sent a new message while you were working"), or,
// when that response ends the pass, runs as a queued pass right after it in
// the same process; either way the endpoint sees it in a later request of the
// same attempt. (Priority "now" would abandon the request in flight, and
// the CLI would report that pass as interrupted.)
//
// # Settled-turn finalization
//
// The harness is a harness.Finalizer: a finalization (the attempt's
// operation settled-tool-finalization) resumes the settled turn's session
// with the host's instruction as its one prompt and every tool withheld,
// which the CLI enforces: --tools "" (the attempt's toolsAllow is [], so no
// built-in passes allowedBuiltins), --strict-mcp-config with no MCP server
// (the attempt offers no gateway tool), --max-turns 1, no injection handle,
// permission prompts off, in the harness's own HOME. A session without a
// binding, or an attempt that allows a tool, is harness_failed with nothing
// started.
//
// # Cancellation
//
// When the attempt's context ends the harness writes the interrupt control
// request {"type":"control_request","request_id":...,"request":{"subtype":
// "interrupt"}}, which the CLI answers with a control_response and a result
// (subtype error_during_execution, terminal_reason aborted_streaming) after
// abandoning the request in flight; then stdin is closed and the process
// exits. Whatever still runs when most of the attempt's grace
// (settlementTimeoutMs, within 0.5 to 10 s) has passed is killed with its
// process group. The attempt returns the context's cause. A process that
// dies or is killed mid-turn ends the turn harness_failed (sideEffects
// possible once a model request may have been made or a tool may have run,
// none before), and the turn is not replayed.
//
// # Gateway tools
//
// The attempt's tools (filtered by toolsAllow) reach the model through an MCP
// server the harness runs for the turn on a loopback port (mcp.go): the CLI
// gets its URL (a random token in the path) and the same token as a bearer
// header in an --mcp-config file (mode 0600, under the home, removed after
// the turn), with --strict-mcp-config so that no other MCP server is loaded,
// and each tool in --allowedTools as mcp__teamster__<tool> (permission mode
// dontAsk denies anything not allowed). ENABLE_TOOL_SEARCH=false keeps the
// tools in the request's tool list instead of behind a tool search. An HTTP
// server in the worker process was chosen over a stdio server because a
// stdio server would be a process the CLI starts (the worker re-executing
// itself, or a helper binary), which then has to reach back to the turn.
// Each tools/call (its _meta "claudecode/toolUseId" is the model's tool_use
// id, used as the call id) goes to Host.Tool, then a tool event, then
// Host.ToolTerminal (whose lastToolError the outcome keeps); the model gets
// the result as text, or isError with "the tool failed: <message>".
//
// Claude's built-in tools (Read, Bash, ...) are off (--tools "") unless the
// settings' builtinTools name them, and then only those the attempt's
// toolsAllow allows. --permission-prompts none makes anything that would ask
// a person be denied; a control request from the CLI is answered with an
// error.
//
// # Auth and environment
//
// The attempt's authProfileRef names an entry of the settings' authProfiles,
// which names the worker variable holding that profile's key (and optionally
// a base URL) and the gateways whose attempts may name it; without a ref the
// settings' apiKeyEnv (default ANTHROPIC_API_KEY) is read. A missing
// profile, another gateway's, or an unset variable fails the attempt
// (harness_failed, sideEffects none), naming the variable; another
// gateway's profile fails as a missing one does. The
// key is passed only as the child's ANTHROPIC_API_KEY (the CLI sends it as
// x-api-key); it is never logged, and never in an event or a result. The
// child inherits only a short list of the worker's variables (PATH, locale,
// proxies (with loopback added to NO_PROXY), CA paths), then HOME, the
// quiet switches DISABLE_AUTOUPDATER, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC,
// DISABLE_TELEMETRY, DISABLE_ERROR_REPORTING,
// CLAUDE_CODE_DISABLE_TERMINAL_TITLE and ENABLE_TOOL_SEARCH=false,
// ANTHROPIC_BASE_URL, and the settings' env. With these the CLI makes no
// request but the turn's POST /v1/messages?beta=true (one per model
// response), so it runs with no network but loopback.
//
// # Settings
//
// The harness entry's "settings": binary (default the project-local install
// .tools/claude/bin/claude, which install.sh creates), home (HOME of the
// CLI; default a directory the harness creates under the system's temp dir
// and removes on Close: the worker carries transcripts between turns with
// ExportState/ImportState, so nothing needs to outlive the harness; set it
// to keep them across restarts), cwd (default <home>/workspace), baseUrl,
// apiKeyEnv, authProfiles, env (values never logged; not HOME or
// ANTHROPIC_API_KEY), minVersion (default PinnedVersion), model (default the
// attempt's modelId), builtinTools, permissionMode (dontAsk, default, or
// bypassPermissions: the modes that never wait for a person), maxTurns.
//
// # Version and runtime artifact
//
// `claude --version` ("2.1.328 (Claude Code)") is run with the first turn;
// a CLI older than minVersion is refused before anything starts
// (harness_failed, sideEffects none, naming both versions), and a failed
// check is tried again by the next turn. The runtime artifact is {id:
// <harness id>, fingerprint: "claude-code/<version>"}.
package claude
