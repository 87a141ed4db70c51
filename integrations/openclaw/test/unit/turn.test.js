import assert from "node:assert/strict";
import { test } from "node:test";
import { resolveConfig } from "../../src/config.js";
import { Turn, createTeamsterHarness } from "../../src/harness.js";
import { Injector } from "../../src/injection.js";
import { TeamsterError, VERSION } from "../../src/wire.js";
import { FakeFleet, params } from "../support/fakefleet.js";

const cfg = resolveConfig({ hostId: "h1", settlementTimeoutMs: 200, resultPollMs: 50, requestTimeoutMs: 1000, advertiseTools: false, routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } });
const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

/** A fleet whose router accepts and whose worker claims, then waits for the test. */
function acceptingFleet(extra = {}) {
  const state = { attempt: null, cancels: [] };
  const fleet = new FakeFleet({
    onRequest: (subject, body, f) => {
      if (subject === "teamster.submit") {
        state.attempt = body;
        setTimeout(() => f.event(body.replyTo, body.attemptId, 1, "claimed", { workerId: "w1", harnessId: "codex", fence: "e:1" }), 1);
        return { v: VERSION, status: "accepted", attemptId: body.attemptId, harnessId: "codex", selection: { selectedReason: "auto_plugin" } };
      }
      if (subject.endsWith(".cancel")) return extra.onCancel ? extra.onCancel(body, f, state) : { v: VERSION, status: "ok" };
      if (subject.endsWith(".inject")) return extra.onInject ? extra.onInject(body, f, state) : { v: VERSION, status: "rejected", error: { code: "no_active_run", message: "x" } };
      return { v: VERSION, status: "ok" };
    },
  });
  return { fleet, state };
}

function finish(fleet, state, seq, result) {
  fleet.event(state.attempt.replyTo, state.attempt.attemptId, seq, "result", { v: VERSION, attemptId: state.attempt.attemptId, assistantTexts: [], usage: { outputTokens: 0 }, ...result });
}

test("a turn streams events into OpenClaw and returns the fleet's result", async () => {
  const { fleet, state } = acceptingFleet();
  const events = [];
  const partials = [];
  const usage = [];
  const p = params({
    onAgentEvent: (e) => events.push(e),
    onPartialReply: (x) => partials.push(x),
    hostCapabilities: { reportOutputTokens: (n) => usage.push(n) },
  });
  const run = new Turn({ cfg, fleet, runtime: {}, log: {}, params: p }).run();
  while (!state.attempt) await tick();
  await tick();
  const a = state.attempt;
  fleet.event(a.replyTo, a.attemptId, 2, "partial", { text: "hel" });
  fleet.event(a.replyTo, a.attemptId, 3, "usage", { outputTokens: 5 });
  fleet.event(a.replyTo, a.attemptId, 3, "usage", { outputTokens: 9 }); // duplicate seq: ignored
  fleet.event(a.replyTo, a.attemptId, 4, "usage", { outputTokens: 12 });
  fleet.event(a.replyTo, "OTHER", 5, "partial", { text: "not ours" });
  finish(fleet, state, 5, { status: "ok", assistantTexts: ["hello"], usage: { outputTokens: 12 } });
  const out = await run;
  assert.deepEqual(out.terminal, { kind: "ok" });
  assert.deepEqual(out.assistantTexts, ["hello"]);
  assert.deepEqual(usage, [5, 7], "per-response output tokens, not the cumulative total");
  assert.deepEqual(partials, [{ text: "hel", delta: "hel" }]);
  assert.ok(events.some((e) => e.stream === "teamster" && e.data.phase === "claimed" && e.data.workerId === "w1"));
  assert.equal(fleet.subs.size, 0, "every subscription is released");
  assert.equal(a.sessionKey, "agent:main:unit");
  assert.equal(a.hostId, "h1");
});

test("an abort in OpenClaw cancels the attempt on the fleet", async () => {
  const { fleet, state } = acceptingFleet({
    onCancel: (body, f, st) => {
      st.cancels.push(body);
      setTimeout(() => finish(f, st, 2, { status: "cancelled", error: { code: "cancelled", message: body.reason, sideEffects: "possible" } }), 1);
      return { v: VERSION, status: "ok" };
    },
  });
  const ac = new AbortController();
  const run = new Turn({ cfg, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  while (!state.attempt) await tick();
  ac.abort();
  const out = await run;
  assert.equal(state.cancels.length, 1);
  assert.equal(state.cancels[0].reason, "openclaw: user_abort");
  assert.ok(fleet.requests.some((r) => r.subject === `teamster.run.${state.attempt.attemptId}.cancel`));
  assert.deepEqual([out.terminal.kind, out.terminal.source], ["aborted", "external"]);
  assert.equal(out.terminal.failure.error.code, "cancelled");
});

test("a cancel for a queued attempt is repeated until a worker runs it", async () => {
  let n = 0;
  const { fleet, state } = acceptingFleet({
    onCancel: (body, f, st) => {
      if (++n < 3) return { v: VERSION, status: "rejected", error: { code: "no_active_run", message: "not running" } };
      setTimeout(() => finish(f, st, 2, { status: "cancelled", error: { code: "cancelled", message: "c", sideEffects: "possible" } }), 1);
      return { v: VERSION, status: "ok" };
    },
  });
  const ac = new AbortController();
  const run = new Turn({ cfg, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  while (!state.attempt) await tick();
  ac.abort();
  const out = await run;
  assert.equal(n, 3);
  assert.equal(out.terminal.kind, "aborted");
});

test("an abort the fleet never confirms still ends the turn after the settlement budget", async () => {
  const { fleet, state } = acceptingFleet({ onCancel: () => new TeamsterError("internal", "down") });
  const ac = new AbortController();
  const t0 = Date.now();
  const run = new Turn({ cfg: { ...cfg, settlementTimeoutMs: 0 }, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  while (!state.attempt) await tick();
  ac.abort();
  const out = await run;
  assert.equal(out.terminal.kind, "aborted");
  assert.match(out.terminal.failure.error.message, /did not confirm the cancel/);
  assert.ok(Date.now() - t0 < 7000);
});

test("the active-run handle's abort cancels like the abort signal", async () => {
  const installed = [];
  const { fleet, state } = acceptingFleet({
    onCancel: (body, f, st) => {
      setTimeout(() => finish(f, st, 2, { status: "cancelled", error: { code: "cancelled", message: "c", sideEffects: "possible" } }), 1);
      return { v: VERSION, status: "ok" };
    },
  });
  const runtime = {
    setActiveEmbeddedRun: (sessionId, handle) => installed.push({ sessionId, handle }),
    clearActiveEmbeddedRun: (sessionId, handle) => installed.push({ cleared: sessionId, handle }),
  };
  const run = new Turn({ cfg, fleet, runtime, log: {}, params: params() }).run();
  while (installed.length === 0) await tick();
  assert.equal(installed[0].sessionId, "sess-1");
  assert.equal(installed[0].handle.messageInjectionV2.version, 2);
  assert.equal(installed[0].handle.isStreaming(), true);
  installed[0].handle.abort();
  const out = await run;
  assert.equal(out.terminal.kind, "aborted");
  assert.equal(installed[1].cleared, "sess-1");
  assert.equal(installed[0].handle.isStreaming(), false);
  assert.ok(state.attempt);
});

test("the durable result is read when the result event is lost", async () => {
  const { fleet, state } = acceptingFleet();
  const run = new Turn({ cfg, fleet, runtime: {}, log: {}, params: params() }).run();
  while (!state.attempt) await tick();
  fleet.durable.set(state.attempt.attemptId, { v: 1, attemptId: state.attempt.attemptId, status: "ok", assistantTexts: ["from the stream"], usage: { outputTokens: 0 } });
  const out = await run;
  assert.deepEqual(out.assistantTexts, ["from the stream"]);
});

test("the fleet down, a rejection and a fallback all fail closed", async () => {
  const down = new FakeFleet();
  down.connectError = new TeamsterError("internal", "teamster: cannot reach the fleet at nats://fake:4222: ECONNREFUSED", "none");
  const out = await createTeamsterHarness({ cfg, fleet: down }).runAttempt(params());
  assert.equal(out.terminal.kind, "failed");
  assert.match(out.terminal.error.message, /nats:\/\/fake:4222/);

  const rejecting = new FakeFleet({ onRequest: () => ({ v: 1, status: "rejected", error: { code: "harness_not_registered", message: "no worker registers codex" } }) });
  const r = await createTeamsterHarness({ cfg, fleet: rejecting }).runAttempt(params());
  assert.equal(r.terminal.error.code, "harness_not_registered");
  assert.match(r.terminal.error.message, /no worker registers codex/);

  const fallback = new FakeFleet({ onRequest: () => ({ v: 1, status: "fallback", attemptId: "A", selection: { selectedReason: "auto_openclaw" } }) });
  const f = await createTeamsterHarness({ cfg, fleet: fallback }).runAttempt(params());
  assert.equal(f.terminal.kind, "failed");
  assert.match(f.terminal.error.message, /never runs a turn elsewhere/);
});

test("V2 injection asserts immediately before dispatch and settles once", async () => {
  const sent = [];
  const fleet = new FakeFleet({
    onRequest: (subject, body) => {
      sent.push({ subject, body });
      return { v: 1, status: "accepted", injectionId: "inj-1", attemptId: "A1" };
    },
  });
  const inj = new Injector({ fleet, attemptId: "A1" });
  const h = inj.handle({ runId: "r" }).messageInjectionV2;
  const calls = [];
  const opts = { onQueueAccepted: (a) => calls.push(["accepted", a]), onQueueSettled: () => calls.push(["settled"]) };
  const p = h.queueMessage("turn left", opts, () => calls.push(["assert", sent.length]), "run");
  await tick();
  inj.onEvent({ injectionId: "inj-1", state: "committed" });
  await p;
  assert.deepEqual(calls, [["assert", 0], ["accepted", true], ["settled"]]);
  assert.deepEqual(sent, [{ subject: "teamster.run.A1.inject", body: { v: 1, attemptId: "A1", text: "turn left", authorityKind: "run" } }]);

  // A revoked assertion rejects before any I/O.
  await assert.rejects(h.queueMessage("no", {}, () => { throw new Error("revoked"); }, "run"), /revoked/);
  assert.equal(sent.length, 1);
  // Source-bound input is never relabelled as run input.
  await assert.rejects(h.queueMessage("sb", {}, () => {}, "source-bound"), (e) => e.code === "injection_requires_v2");
  assert.equal(sent.length, 1);
  // A settlement seen before the reply, and items left at the end.
  const early = h.queueMessage("x", { waitForTranscriptCommit: false }, () => {}, "run");
  await early;
  inj.end();
  assert.equal(h.isAvailable(), false);
  await assert.rejects(h.queueMessage("late", {}, () => {}, "run"), (e) => e.code === "no_active_run");
});

test("host callbacks run OpenClaw's tools and report terminal outcomes", async () => {
  const { fleet, state } = acceptingFleet();
  const observed = [];
  const tool = { name: "lookup", description: "d", parameters: { type: "object" }, execute: async (id, args) => ({ content: [{ type: "text", text: `found ${args.q}` }], details: { id } }) };
  const p = params({
    hostCapabilities: { createToolSurface: () => [tool] },
    observeToolTerminal: (o) => {
      observed.push(o);
      return { lastToolError: o.outcome === "failure" ? { toolName: o.toolName, error: "x" } : undefined, executionStarted: true };
    },
  });
  const run = new Turn({ cfg: { ...cfg, advertiseTools: true }, fleet, runtime: {}, log: {}, params: p }).run();
  while (!state.attempt) await tick();
  assert.deepEqual(state.attempt.tools, [{ name: "lookup", description: "d", inputSchema: { type: "object" } }]);
  const id = state.attempt.attemptId;
  const ok = await fleet.hostCall("h1", id, "tool", { callId: "call-1", name: "lookup", args: { q: "x" } });
  assert.equal(ok.status, "ok");
  assert.deepEqual(ok.result.content, [{ type: "text", text: "found x" }]);
  const missing = await fleet.hostCall("h1", id, "tool", { callId: "call-2", name: "nope", args: {} });
  assert.equal(missing.status, "rejected");
  const term = await fleet.hostCall("h1", id, "toolTerminal", { callId: "call-2", name: "nope", executionStarted: false, outcome: "failure", error: { code: "invalid_request", message: "no tool" } });
  assert.deepEqual(term, { v: 1, status: "ok", lastToolError: { toolName: "nope", error: "x" } });
  assert.equal(observed[0].outcome, "failure");
  assert.equal(observed[0].failure.error, "no tool");
  const usage = await fleet.hostCall("h1", id, "usage", { responseId: "resp-1", outputTokens: 3 });
  assert.equal(usage.status, "ok");
  const ui = await fleet.hostCall("h1", id, "userInput", { question: "?" });
  assert.equal(ui.status, "rejected");
  finish(fleet, state, 2, { status: "ok", assistantTexts: ["done"] });
  const out = await run;
  assert.deepEqual(out.toolMetas, [{ toolName: "lookup", toolCallId: "call-1", isError: false }]);
});
