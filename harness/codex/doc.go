// Package codex is teamster's native Codex harness: it runs each attempt as
// one turn of the Codex app-server (`codex app-server`, from the npm package
// @openai/codex), driven by the worker that claimed the attempt.
//
// # The app-server
//
// One app-server process per harness instance, which is one per worker and
// harness entry, shared by all the worker's runs. It starts with the first
// turn, as
//
//	codex app-server --listen stdio:// -c thread_unload_delay_secs=0
//
// with the settings' environment. The protocol (0.171.0, read from
// `codex app-server generate-json-schema --experimental` and checked against
// the running server) is JSON-RPC without the "jsonrpc" member, one JSON
// object per line: requests {id, method, params}, responses {id, result} or
// {id, error: {code, message}} (refusals are code -32600 with a message),
// notifications {method, params}. The server also sends requests (tool calls,
// approvals) with ids of its own (numbers from 0).
//
// Handshake: initialize {clientInfo: {name: "teamster", title, version},
// capabilities: {experimentalApi: true, optOutNotificationMethods: [...]}}
// answers {userAgent: "teamster/0.171.0 (Debian 12.0.0; x86_64) xterm
// (teamster; 1)", codexHome, platformFamily, platformOs}; the version is the
// part after the first "/". An app-server without a version there, or older
// than the settings' minVersion (default: PinnedVersion), is refused before
// anything else is sent: the attempt ends harness_failed with sideEffects
// none, naming both versions. Otherwise the harness sends the initialized
// notification.
//
// The process is supervised: when it dies, turns running on it end
// harness_failed ("exited during the turn ...; the turn is not replayed") and
// it is restarted with exponential backoff (200 ms to 30 s; a start that
// failed fails the turns that arrive while the supervisor backs off, a crash
// of a healthy process makes them wait for the restart). The process runs in
// its own process group, killed as a whole; on Linux it also dies with the
// worker (Pdeathsig). Close stops it.
//
// # One turn
//
//  1. The thread: thread/start {model, cwd, dynamicTools,
//     experimentalRawEvents: true} for a session without a binding (the
//     answer's thread.id is the binding), else thread/resume {threadId,
//     excludeTurns: true, model, cwd} with the thread id of the binding the
//     worker read from the session record (Run.Binding). A resume that
//     another process still holds ("thread ... already has an active
//     writer") is retried for up to 10 s; a thread that cannot be resumed
//     ("no rollout found for thread id ...": the rollout was not restored,
//     or it was deleted) ends the attempt harness_failed with
//     sideEffects none, never silently on a new thread. A new thread has no
//     rollout until its first turn, so a thread can only be resumed after a
//     turn ran on it.
//  2. turn/start {threadId, input: [{type: "text", text: prompt,
//     text_elements: []}]} answers {turn: {id, status: "inProgress"}}.
//  3. Notifications, routed to the run by their threadId: turn/started,
//     item/started, item/agentMessage/delta {turnId, itemId, delta} (sent on
//     as partial events {text, itemId}), item/completed {item} (an
//     agentMessage's text is an assistant text; reasoning and plan items are
//     agent events and the outcome's reasoning and plan text),
//     thread/tokenUsage/updated and rawResponse/completed (usage, below),
//     error {error, willRetry}, and turn/completed {turn: {id, status:
//     completed|interrupted|failed, error}}, which ends the turn.
//  4. The thread is let go: thread/unsubscribe, then thread/closed. With
//     thread_unload_delay_secs=0 the app-server unloads the thread at once
//     (about 10 ms) and releases its writer lock in CODEX_HOME, before the
//     worker finishes the attempt and releases the session lease; so the
//     session's next turn can resume the thread on any worker (with a
//     CODEX_HOME of its own or a shared one). (By default an unsubscribed thread stays loaded for about a
//     minute, and a process that kept it loaded would go on with a stale
//     history.) A killed process releases its locks too.
//
// A successful turn returns the binding {"threadId": "<id>"} as
// Outcome.NativeSession; the worker writes it to the session record with its
// fenced finish.
//
// # Native state
//
// The harness is a harness.StateCarrier (state.go): its state for a binding
// is the thread's rollout, CODEX_HOME/sessions/YYYY/MM/DD/
// rollout-<time>-<threadId>.jsonl. The worker saves it after each successful
// turn to the object store TEAMSTER_NATIVE_STATE and writes it, at the same
// path under this worker's CODEX_HOME, before the thread's next turn here;
// thread/resume, on the running app-server, finds a rollout written there,
// so a session moves between workers that share no CODEX_HOME.
//
// # Usage
//
// Each completed model response is reported once through the host
// (Host.ReportUsage), with that response's output tokens; see usageMeter for
// how the two notifications that carry usage are told apart and
// de-duplicated.
//
// # Cancellation
//
// When the attempt's context ends (cancel, deadline, drain timeout, lost
// lease) the harness sends turn/interrupt {threadId, turnId}, waits (within
// most of the grace (settlementTimeoutMs)) for turn/completed with status
// "interrupted", lets the thread go, and returns the context's cause.
//
// # Server requests
//
// item/tool/call {threadId, turnId, callId, namespace, tool, arguments} runs
// one of the attempt's tools (offered as dynamicTools when the thread
// starts, filtered by toolsAllow): Host.Tool, a tool event, then
// Host.ToolTerminal (whose lastToolError the outcome keeps), then the answer
// {contentItems: [{type: "inputText", text}], success}. A tool the attempt
// did not offer is answered success false without reaching the host (a
// resumed thread keeps the dynamic tools it was started with: thread/resume
// cannot change them). Approval requests
// (item/commandExecution/requestApproval and item/fileChange/requestApproval
// {decision: accept|decline}, item/permissions/requestApproval, and the
// legacy execCommandApproval and applyPatchApproval) are declined unless the
// settings allow approvals; each decision is an agent event {kind:
// "approval", request, decision}. MCP elicitations are declined; other
// requests are refused with -32601. item/tool/requestUserInput is among them
// but never arrives: the app-server offers the model request_user_input,
// and outside Plan mode (the harness never starts one) answers the call
// itself ("unavailable in Default mode"), so the gateway's userInput
// callback is not asked (TestRequestUserInputStaysInsideTheAppServer).
//
// # Injection
//
// The run installs its handle once the turn has an id: a V2 handle for
// injection "v2", a V1 handle for "v1". Both steer the turn with turn/steer
// {threadId, expectedTurnId, input}; see steer.go for the settlement of each
// item.
//
// # Settings
//
// The harness entry's "settings": binary (default: the project-local
// install .tools/codex/bin/codex, which install.sh creates),
// codexHome, env (extra variables such as the provider key; values are never
// logged), minVersion, allowApprovals, model (default the attempt's
// modelId), cwd. The app-server inherits only a short list of the worker's
// variables (PATH, HOME, locale, proxies, CA paths, CODEX_HOME), never the
// worker's own settings. Model providers, auth and everything else are
// CODEX_HOME's config.toml.
//
// # Runtime artifact
//
// {id: <harness id>, fingerprint: "codex-app-server/<version>"}, checked
// after the process is acquired and before any thread is started or resumed.
package codex
