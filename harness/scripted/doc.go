// Package scripted is teamster's built-in harness: the one demos, tests and
// benchmarks drive (docs/PROTOCOL.md, "Local fleet and tests").
//
// A prompt that starts with {"script": (after leading whitespace) is a JSON
// object {"script": [steps...]} whose steps are played in order; any other
// prompt is echoed: one partial event {"text": prompt} and the prompt as the
// only assistant text. Each step is an object with exactly one key:
//
//	{"say": text}            partial event {"text": text}; text is appended to the assistant texts
//	{"reason": text}         agent event {"kind": "reasoning", "text": text}; added to the reasoning text
//	{"plan": text}           agent event {"kind": "plan", "text": text}; added to the plan text
//	{"sleep": ms}            waits ms milliseconds (0 to 86,400,000)
//	{"tool": {"name": n, "args": {...}}}
//	                         calls the host's tool callback with call id call-<k> (k counts tool
//	                         steps from 1), emits a tool event, appends the result's JSON to the
//	                         assistant texts when the call succeeded, then reports the outcome
//	                         through toolTerminal and keeps the host's lastToolError
//	{"usage": outputTokens}  reports usage for response id resp-<k> (k counts usage steps from 1)
//	{"usage": {"responseId": id, "outputTokens": n}}
//	                         reports usage for an explicit response id (the
//	                         same id twice shows the host counts it once)
//	{"awaitInjection": ms}   waits up to ms (0 to 86,400,000) for injected input; every queued
//	                         item is taken, appended to the assistant texts and settled committed;
//	                         each image that came with it is appended after it as
//	                         "[image <mimeType>, <n> bytes, sha256 <12 hex digits>]"
//	{"ask": {"question": q, "choices": [...]}}
//	                         asks the host a blocking question (userInput) and appends the
//	                         answer to the assistant texts; a refusal ends the attempt with it
//	{"fail": message}        ends the attempt with harness_failed and message
//
// A tool step with "quiet": true keeps the result out of the assistant
// texts: a tool-only turn, whose settled tools OpenClaw then asks a
// finalization for. The harness is a harness.Finalizer: a settled-turn
// finalization plays nothing, calls nothing, and answers
// "finalized (thread <thread>, turn <n>): <first line of the instruction>"
// on the session's thread.
//
// The event data is bus.PartialData, bus.AgentData and bus.ToolData.
//
// The whole script is checked before its first step runs: malformed JSON, a
// step that is not an object with exactly one key, an unknown step or a value
// of the wrong type ends the attempt with harness_failed naming the step's
// index (script[i], counting from 0), and nothing else happens.
//
// When the attempt's context is done, the run returns promptly: with the
// context's cause when that is a *teamster.Error (the worker cancels with
// causes such as lease_lost or drain_timeout), else deadline_exceeded or
// cancelled. A host callback that fails ends the attempt with the host's
// *teamster.Error, or harness_failed.
//
// The manifest's injection level decides the active-run handle the run
// installs: an injection.V2 for "v2", an injection.V1 for "v1", none for
// "none". Injected text waits in the run's queue until an awaitInjection step
// takes it; whatever is still queued when the run returns is settled
// cancelled, and input that arrives after that is refused (no_active_run,
// settled rejected). A V2 handle calls the host's assertion immediately
// before it queues an item and again before it dispatches it; an item whose
// assertion is false is settled rejected and never reaches the reply.
//
// An attempt with expectedRuntimeArtifact runs only when the artifact is this
// harness's ({id: <harness id>, fingerprint: "scripted/1"}), else it ends with
// runtime_artifact_mismatch; captureRuntimeArtifact returns that artifact.
//
// A successful turn returns the native binding
// {"thread": "scripted-<sessionId>", "turns": N}, N counting the session's
// completed turns through the binding stored by the previous one.
//
// A Ledger, when given, records the start and end of every run so that tests
// can prove that no two runs of one session overlapped (CheckLedger).
package scripted
