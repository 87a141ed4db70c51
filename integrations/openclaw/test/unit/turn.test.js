// Turns, cancellation, the durable result, failing closed, steering and host
// callbacks, over a real nats-server: the test plays teamster's router and
// worker on the contract's subjects (FleetPlay) and the plugin uses its own
// Fleet, the product's NATS connection.

import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRespondersError } from "@nats-io/transport-node";
import { resolveConfig } from "../../src/config.js";
import { Fleet } from "../../src/fleet.js";
import { Turn, createTeamsterHarness, resetSession } from "../../src/harness.js";
import { HostCallbacks } from "../../src/host.js";
import { Injector } from "../../src/injection.js";
import { ERROR_CODES, VERSION, decode, encode, newAttemptId, resultStatusFor } from "../../src/wire.js";
import { freePort } from "../support/env.js";
import { FleetPlay, flushFleet, pluginFleet, until, useNatsServer } from "../support/nats.js";
import { params } from "../support/params.js";

const nats = useNatsServer();
const CFG = { hostId: "h1", settlementTimeoutMs: 200, resultPollMs: 50, requestTimeoutMs: 1000, advertiseTools: false, routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } };
const tick = (ms = 5) => new Promise((r) => setTimeout(r, ms));

/**
 * acceptingFleet: the plugin's Fleet, and a FleetPlay whose router accepts
 * and whose worker claims the attempt (the claimed event), then waits for the
 * test. extra: {onCancel, onInject} worker handlers; cfg: plugin config.
 */
async function acceptingFleet(t, extra = {}, cfg = {}) {
  const play = await FleetPlay.connect(t, nats);
  await play.router();
  await play.worker(extra);
  const fleet = pluginFleet(t, nats, { ...CFG, ...cfg });
  return { fleet, play };
}

/** waitAttempt waits until the router received the turn's attempt. */
async function waitAttempt(play) {
  await until(() => play.attempt, "the attempt on teamster.submit");
  return play.attempt;
}

/** assertUnserved: nobody subscribes subject any more (a request gets no responders). */
async function assertUnserved(play, subject) {
  await assert.rejects(play.nc.request(subject, new Uint8Array(0), { timeout: 2000 }), (e) => e instanceof NoRespondersError || e?.cause instanceof NoRespondersError, subject);
}

test("a turn streams events into OpenClaw and returns the fleet's result", async (t) => {
  const { fleet, play } = await acceptingFleet(t);
  const events = [];
  const partials = [];
  const usage = [];
  const p = params({
    onAgentEvent: (e) => events.push(e),
    onPartialReply: (x) => partials.push(x),
    hostCapabilities: { reportOutputTokens: (n) => usage.push(n) },
  });
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: p }).run();
  const a = await waitAttempt(play);
  play.event(a.replyTo, a.attemptId, 2, "partial", { text: "hel" });
  play.event(a.replyTo, a.attemptId, 3, "usage", { outputTokens: 5 });
  play.event(a.replyTo, a.attemptId, 3, "usage", { outputTokens: 9 }); // duplicate seq: ignored
  play.event(a.replyTo, a.attemptId, 4, "usage", { outputTokens: 12 });
  play.event(a.replyTo, "OTHER", 5, "partial", { text: "not ours" });
  play.result(a, 5, { status: "ok", assistantTexts: ["hello"], usage: { outputTokens: 12 } });
  const out = await run;
  assert.deepEqual(out.terminal, { kind: "ok" });
  assert.deepEqual(out.assistantTexts, ["hello"]);
  assert.deepEqual(usage, [5, 7], "per-response output tokens, not the cumulative total");
  assert.deepEqual(partials, [{ text: "hel", delta: "hel" }]);
  assert.ok(events.some((e) => e.stream === "teamster" && e.data.phase === "claimed" && e.data.workerId === "w1"));
  // The prepared attempt as the router received it on teamster.submit.
  assert.equal(play.requestsOn("teamster.submit").length, 1);
  assert.equal(a.v, VERSION);
  assert.equal(a.sessionKey, "agent:main:unit");
  assert.equal(a.sessionId, "sess-1");
  assert.equal(a.hostId, "h1");
  assert.deepEqual([a.provider, a.modelId, a.prompt], ["openai", "echo", "hello"]);
  assert.deepEqual(a.modelProvider, { requestTransportOverrides: "none", runtimePolicy: { compatibleIds: ["codex"] } });
  assert.match(a.replyTo, /^_INBOX\./);
  // Every subscription of the turn is released: its reply subject and its
  // host-callback subjects have no subscriber left on the server.
  await flushFleet(fleet);
  await assertUnserved(play, a.replyTo);
  await assertUnserved(play, `teamster.host.h1.${a.attemptId}.tool`);
});

test("an abort in OpenClaw cancels the attempt on the fleet", async (t) => {
  const { fleet, play } = await acceptingFleet(t, {
    onCancel: (body, { respond }) => {
      respond({ v: VERSION, status: "ok" });
      play.result(play.attempt, 2, { status: "cancelled", error: { code: "cancelled", message: body.reason, sideEffects: "possible" } });
    },
  });
  const ac = new AbortController();
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  const a = await waitAttempt(play);
  ac.abort();
  const out = await run;
  const cancels = play.requestsOn(`teamster.run.${a.attemptId}.cancel`);
  assert.equal(cancels.length, 1);
  assert.equal(cancels[0].reason, "openclaw: user_abort");
  assert.deepEqual([out.terminal.kind, out.terminal.source], ["aborted", "external"]);
  assert.equal(out.terminal.failure.error.code, "cancelled");
});

test("a cancel for a queued attempt is repeated until a worker runs it", async (t) => {
  let n = 0;
  const { fleet, play } = await acceptingFleet(t, {
    onCancel: (body, { respond }) => {
      if (++n < 3) return { v: VERSION, status: "rejected", error: { code: "no_active_run", message: "not running" } };
      respond({ v: VERSION, status: "ok" });
      play.result(play.attempt, 2, { status: "cancelled", error: { code: "cancelled", message: "c", sideEffects: "possible" } });
    },
  });
  const ac = new AbortController();
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  const a = await waitAttempt(play);
  ac.abort();
  const out = await run;
  assert.equal(n, 3);
  assert.equal(play.requestsOn(`teamster.run.${a.attemptId}.cancel`).length, 3);
  assert.equal(out.terminal.kind, "aborted");
});

test("an abort the fleet never confirms still ends the turn after the settlement budget", async (t) => {
  // No worker serves the cancel subject: every cancel request gets no responders.
  const { fleet, play } = await acceptingFleet(t, { onCancel: null }, { settlementTimeoutMs: 0 });
  const ac = new AbortController();
  const t0 = Date.now();
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: params({ abortSignal: ac.signal }) }).run();
  await waitAttempt(play);
  ac.abort();
  const out = await run;
  assert.equal(out.terminal.kind, "aborted");
  assert.match(out.terminal.failure.error.message, /did not confirm the cancel/);
  assert.ok(Date.now() - t0 < 7000);
});

test("the active-run handle's abort cancels like the abort signal", async (t) => {
  const installed = [];
  const { fleet, play } = await acceptingFleet(t, {
    onCancel: (body, { respond }) => {
      respond({ v: VERSION, status: "ok" });
      play.result(play.attempt, 2, { status: "cancelled", error: { code: "cancelled", message: "c", sideEffects: "possible" } });
    },
  });
  const runtime = {
    setActiveEmbeddedRun: (sessionId, handle) => installed.push({ sessionId, handle }),
    clearActiveEmbeddedRun: (sessionId, handle) => installed.push({ cleared: sessionId, handle }),
  };
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime, log: {}, params: params() }).run();
  await until(() => installed.length > 0, "setActiveEmbeddedRun");
  assert.equal(installed[0].sessionId, "sess-1");
  assert.equal(installed[0].handle.messageInjectionV2.version, 2);
  assert.equal(installed[0].handle.isStreaming(), true);
  installed[0].handle.abort();
  const out = await run;
  assert.equal(out.terminal.kind, "aborted");
  assert.equal(installed[1].cleared, "sess-1");
  assert.equal(installed[0].handle.isStreaming(), false);
  assert.equal(play.requestsOn(`teamster.run.${play.attempt.attemptId}.cancel`).length, 1);
});

test("every error code of a fleet result reaches OpenClaw's terminal with the fleet's message", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  let next;
  await play.router((body, { respond }) => {
    respond({ v: VERSION, status: "accepted", attemptId: body.attemptId, harnessId: "codex" });
    play.result(body, 1, next);
  });
  const fleet = pluginFleet(t, nats, CFG);
  const harness = createTeamsterHarness({ cfg: fleet.cfg, fleet });
  const kinds = { deadline_exceeded: "timeout", queue_timeout: "timeout", cancelled: "aborted" };
  assert.equal(ERROR_CODES.length, 19);
  for (const code of ERROR_CODES) {
    const sideEffects = code === "invalid_request" ? "none" : "possible";
    next = { status: resultStatusFor(code), assistantTexts: ["partial"], error: { code, message: `fleet message for ${code}`, sideEffects } };
    const out = await harness.runAttempt(params());
    const a = play.attempt;
    const kind = kinds[code] ?? "failed";
    assert.equal(out.terminal.kind, kind, code);
    const err = kind === "failed" ? out.terminal.error : out.terminal.failure.error;
    assert.equal(err.code, code);
    assert.equal(err.message, `teamster ${code}: fleet message for ${code} (attempt ${a.attemptId}, side effects: ${sideEffects})`);
    assert.equal(out.replayMetadata.replaySafe, sideEffects === "none", code);
  }
  assert.equal(play.attempts.length, ERROR_CODES.length);
});

test("the durable result is read when the result event is lost", async (t) => {
  const { fleet, play } = await acceptingFleet(t);
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: params() }).run();
  const a = await waitAttempt(play);
  // No result event: the worker's result is only stored durably, read through the routers (teamster.get.result).
  await play.storeResult({ v: 1, attemptId: a.attemptId, status: "ok", assistantTexts: ["from the stream"], usage: { outputTokens: 0 } });
  const out = await run;
  assert.deepEqual(out.terminal, { kind: "ok" });
  assert.deepEqual(out.assistantTexts, ["from the stream"]);
});

test("the fleet down, a rejection and a fallback all fail closed", async (t) => {
  // Nothing listens on this port: the connection is refused.
  const deadUrl = `nats://127.0.0.1:${await freePort()}`;
  const down = new Fleet({ cfg: resolveConfig({ ...CFG, natsUrl: deadUrl, connectTimeoutMs: 2000 }) });
  t.after(() => down.close());
  const out = await createTeamsterHarness({ cfg: down.cfg, fleet: down }).runAttempt(params());
  assert.equal(out.terminal.kind, "failed");
  assert.equal(out.terminal.error.code, "internal");
  assert.ok(out.terminal.error.message.includes(`cannot reach the fleet at ${deadUrl}`), out.terminal.error.message);
  assert.equal(out.replayMetadata.replaySafe, true);

  const rejecting = await FleetPlay.connect(t, nats);
  await rejecting.router(() => ({ v: 1, status: "rejected", error: { code: "harness_not_registered", message: "no worker registers codex" } }));
  const fleet = pluginFleet(t, nats, CFG);
  const r = await createTeamsterHarness({ cfg: fleet.cfg, fleet }).runAttempt(params());
  assert.equal(r.terminal.error.code, "harness_not_registered");
  assert.match(r.terminal.error.message, /no worker registers codex/);
  assert.ok(r.terminal.error.message.includes(nats.url));
  await rejecting.close();

  const fallback = await FleetPlay.connect(t, nats);
  await fallback.router((body) => ({ v: 1, status: "fallback", attemptId: body.attemptId, selection: { selectedReason: "auto_openclaw" } }));
  const f = await createTeamsterHarness({ cfg: fleet.cfg, fleet }).runAttempt(params());
  assert.equal(f.terminal.kind, "failed");
  assert.match(f.terminal.error.message, /never runs a turn elsewhere/);
  assert.equal(fallback.attempts.length, 1);
  assert.equal(rejecting.attempts.length, 1);
});

/**
 * claimedInjector: an Injector on the plugin's Fleet whose run a worker has
 * claimed. The worker (FleetPlay) answers teamster.run.<id>.inject with
 * onInject(body, ctx, n) (default: accepted as inj-<n>) and publishes
 * injection events with settle(...) on the reply subject the injector
 * listens to, as a Turn does.
 */
async function claimedInjector(t, onInject, cfg = {}) {
  const attemptId = newAttemptId();
  const play = await FleetPlay.connect(t, nats);
  let n = 0;
  await play.worker({
    onCancel: null,
    onInject: (body, ctx) => (onInject ? onInject(body, ctx, ++n) : { v: 1, status: "accepted", injectionId: `inj-${++n}`, attemptId }),
  });
  const fleet = pluginFleet(t, nats, { ...CFG, ...cfg });
  const inj = new Injector({ fleet, attemptId });
  const events = fleet.newInbox();
  const sub = await fleet.subscribe(events, (m) => {
    const e = decode(m.data);
    if (e.type === "injection") inj.onEvent(e.data);
  });
  t.after(() => sub.unsubscribe());
  let seq = 0;
  const settle = (data) => play.event(events, attemptId, ++seq, "injection", data);
  inj.markClaimed();
  const sent = () => play.requestsOn(`teamster.run.${attemptId}.inject`);
  return { inj, play, fleet, attemptId, sent, settle, h: inj.handle({ runId: "r" }).messageInjectionV2 };
}

test("V2 injection asserts immediately before dispatch and settles once", async (t) => {
  const { inj, sent, settle, attemptId, fleet, play, h } = await claimedInjector(t);
  const calls = [];
  const opts = { waitForTranscriptCommit: true, onQueueAccepted: (a) => calls.push(["accepted", a]), onQueueSettled: () => calls.push(["settled"]) };
  const p = h.queueMessage("turn left", opts, () => calls.push(["assert", sent().length]), "run");
  await until(() => calls.some((c) => c[0] === "accepted"), "the inject reply");
  settle({ injectionId: "inj-1", state: "committed" });
  assert.equal(await p, undefined);
  // The handle's own check and the host's assertion run before the
  // connection await and again synchronously before the publish.
  assert.deepEqual(calls, [["assert", 0], ["assert", 0], ["accepted", true], ["settled"]]);
  assert.deepEqual(sent(), [{ v: 1, attemptId, text: "turn left", authorityKind: "run" }]);

  // An assertion revoked during the await before the publish: nothing is sent.
  let n = 0;
  await assert.rejects(h.queueMessage("no", {}, () => { if (++n > 1) throw new Error("revoked"); }, "run"), /revoked/);
  await assert.rejects(h.queueMessage("no", {}, () => false, "run"), (e) => e.code === "cancelled");
  // Source-bound input without an assertion is never relabelled as run
  // input, an unknown authority is refused, and so are images that are not
  // OpenClaw's inline ImageContent and file attachments.
  const refused = [];
  await assert.rejects(h.queueMessage("sb", { onQueueAccepted: (a) => refused.push(a) }, undefined, "source-bound"), (e) => e.code === "invalid_request");
  await assert.rejects(h.queueMessage("x", { onQueueAccepted: (a) => refused.push(a) }, () => {}, "owner"), (e) => e.code === "invalid_request");
  await assert.rejects(h.queueMessage("img", { images: [{ type: "image" }] }, () => {}, "run"), (e) => e.code === "invalid_request");
  await assert.rejects(h.queueMessage("file", { media: [{ path: "/tmp/x.pdf" }] }, () => {}, "run"), (e) => e.code === "invalid_request");
  assert.deepEqual(refused, [false, false]);
  await flushFleet(fleet);
  await play.flush();
  assert.equal(sent().length, 1, "nothing refused reached the worker");
  // Without waitForTranscriptCommit the item returns once admitted and settles later.
  const settled = [];
  assert.equal(await h.queueMessage("x", { onQueueSettled: () => settled.push("x") }, () => {}, "run"), undefined);
  assert.deepEqual(settled, []);
  settle({ injectionId: "inj-2", state: "committed" });
  await until(() => settled.length > 0, "the injection event of inj-2");
  assert.deepEqual(settled, ["x"]);
  inj.end();
  assert.equal(h.isAvailable(), false);
  await assert.rejects(h.queueMessage("late", {}, () => {}, "run"), (e) => e.code === "no_active_run");
  assert.equal(sent().length, 2);
});

test("source-bound steering carries OpenClaw's assertion to the fleet, which asks for it at dispatch", async (t) => {
  const { inj, sent, settle, attemptId, h } = await claimedInjector(t);
  // OpenClaw's assertion: returns while current, throws its authority error
  // once revoked, and keeps throwing.
  class MessageInjectionAuthorityError extends Error {}
  let revoked;
  const assertCurrent = () => {
    if (revoked) throw revoked;
  };
  const kept = h.queueMessage("turn left", { waitForTranscriptCommit: true }, assertCurrent, "source-bound");
  await until(() => sent().length === 1, "the inject request");
  const [body] = sent();
  assert.deepEqual(Object.keys(body).sort(), ["attemptId", "authorityKind", "hostAssertion", "text", "v"]);
  assert.equal(body.authorityKind, "source-bound");
  assert.equal(body.attemptId, attemptId);
  assert.match(body.hostAssertion, /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/);
  // The worker asks (assertCurrent host callback): current.
  assert.equal(inj.hostAssert(body.hostAssertion), true);
  assert.equal(inj.hostAssert("oc-unknown"), false);
  settle({ injectionId: "inj-1", state: "committed" });
  assert.equal(await kept, undefined);
  assert.equal(inj.hostAssert(body.hostAssertion), false, "a settled item's assertion is forgotten");

  // Revoked after the fleet accepted it: the worker's next question gets
  // false, the fleet drops the item, and the item fails with OpenClaw's own
  // authority error (so OpenClaw does not run it as a later turn).
  const dropped = h.queueMessage("turn right", { waitForTranscriptCommit: true }, assertCurrent, "source-bound");
  await until(() => sent().length === 2, "the second inject request");
  const id = sent()[1].hostAssertion;
  assert.notEqual(id, body.hostAssertion);
  revoked = new MessageInjectionAuthorityError("Message injection authority is no longer current");
  assert.equal(inj.hostAssert(id), false);
  revoked = undefined; // appears current again: the assertion stays false
  assert.equal(inj.hostAssert(id), false);
  settle({ injectionId: "inj-2", state: "rejected", code: "source_revoked" });
  await assert.rejects(dropped, (e) => e instanceof MessageInjectionAuthorityError);

  // An item in flight when the run ends: its assertion answers false.
  const late = h.queueMessage("late", {}, assertCurrent, "source-bound");
  await until(() => sent().length === 3, "the third inject request");
  await late;
  inj.end();
  assert.equal(inj.hostAssert(sent()[2].hostAssertion), false);
});

test("steering carries inline images within the envelope's 1 MiB", async (t) => {
  const { sent, settle, attemptId, h, inj } = await claimedInjector(t);
  assert.equal(inj.handle({ runId: "r" }).supportsQueueMessageImages, true);
  const img = { type: "image", data: Buffer.from("a small picture").toString("base64"), mimeType: "image/png", sourceIndex: 0 };
  const p = h.queueMessage("look", { waitForTranscriptCommit: true, images: [img] }, () => {}, "run");
  await until(() => sent().length === 1, "the inject request");
  assert.deepEqual(sent()[0], { v: 1, attemptId, text: "look", authorityKind: "run", images: [{ type: "image", data: img.data, mimeType: "image/png" }] });
  settle({ injectionId: "inj-1", state: "committed" });
  assert.equal(await p, undefined);
  // Over 1 MiB: refused before anything is sent (OpenClaw then runs it as
  // the next turn).
  const big = { ...img, data: "A".repeat(1 << 20) };
  const accepted = [];
  await assert.rejects(h.queueMessage("huge", { images: [big], onQueueAccepted: (a) => accepted.push(a) }, () => {}, "run"), (e) => e.code === "payload_too_large");
  assert.deepEqual(accepted, [false]);
  assert.equal(sent().length, 1);
});

test("steering is unavailable until a worker claimed the attempt", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  await play.worker({ onCancel: null, onInject: () => ({ v: 1, status: "accepted", injectionId: "inj-1" }) });
  const fleet = pluginFleet(t, nats, CFG);
  const inj = new Injector({ fleet, attemptId: newAttemptId() });
  const h = inj.handle({ runId: "r" });
  assert.equal(h.messageInjectionV2.isAvailable(), false);
  await assert.rejects(h.messageInjectionV2.queueMessage("early", {}, () => {}, "run"), (e) => e.code === "no_active_run" && /not started/.test(e.message));
  await flushFleet(fleet);
  await play.flush();
  assert.equal(play.requests.length, 0);
  inj.markClaimed();
  assert.equal(h.messageInjectionV2.isAvailable(), true);
  h.abort();
  assert.equal(h.messageInjectionV2.isAvailable(), false);
  assert.equal(h.isAborted(), true);
});

test("a steered item the fleet cancels or rejects fails; an unknown fate is unconfirmed", async (t) => {
  const { inj, h, sent, settle } = await claimedInjector(t);
  const cancelled = h.queueMessage("a", { waitForTranscriptCommit: true }, () => {}, "run");
  const rejected = h.queueMessage("b", { waitForTranscriptCommit: true }, () => {}, "run");
  const lost = h.queueMessage("c", { waitForTranscriptCommit: true }, () => {}, "run");
  await until(() => sent().length === 3, "three inject requests");
  assert.deepEqual(sent().map((b) => b.text), ["a", "b", "c"]);
  settle({ injectionId: "inj-1", state: "cancelled" });
  settle({ injectionId: "inj-2", state: "rejected", code: "lease_lost" });
  await assert.rejects(cancelled, (e) => e.code === "cancelled");
  await assert.rejects(rejected, (e) => e.code === "lease_lost");
  inj.end(); // the run ended and inj-3 was never settled (its event was lost)
  const r = await lost;
  assert.equal(r.transcriptCommit, "unconfirmed");
});

test("a settlement that arrives before the inject reply settles the item", async (t) => {
  let settleEarly;
  const { h, inj, settle } = await claimedInjector(t, (body, { respond }) => {
    // The worker publishes the injection event, then replies: the event
    // overtakes the reply.
    settleEarly({ injectionId: "inj-early", state: "committed" });
    respond({ v: 1, status: "accepted", injectionId: "inj-early", attemptId: body.attemptId });
  });
  settleEarly = settle;
  const settled = [];
  assert.equal(await h.queueMessage("fast", { waitForTranscriptCommit: true, onQueueSettled: () => settled.push(1) }, () => {}, "run"), undefined);
  assert.deepEqual(settled, [1]);
  assert.equal(inj.items.size, 0);
  assert.equal(inj.early.size, 0);
});

test("an inject request without a reply is reported unconfirmed and settled when the run ends", async (t) => {
  // The worker receives the request and never replies: the fate is unknown.
  const { inj, h, play, sent } = await claimedInjector(t, () => undefined, { requestTimeoutMs: 200 });
  const calls = [];
  const r = await h.queueMessage("t", { waitForTranscriptCommit: true, onQueueAccepted: (a) => calls.push(a), onQueueSettled: () => calls.push("settled") }, () => {}, "run");
  assert.equal(r.transcriptCommit, "unconfirmed");
  assert.match(r.errorMessage, /no reply on teamster\.run\.\w+\.inject .* within 200 ms/);
  assert.deepEqual(calls, [true]);
  assert.equal(sent().length, 1, "the request reached the worker");
  // No worker serves the subject any more: certainly not delivered, a plain
  // failure OpenClaw may replay.
  await play.close();
  await assert.rejects(h.queueMessage("n", { onQueueAccepted: (a) => calls.push(a) }, () => {}, "run"), /nobody is serving/);
  assert.deepEqual(calls, [true, false]);
  inj.end();
  assert.deepEqual(calls, [true, false, "settled"]);
});

test("the handle is attached to the reply operation and registered with the attempt's ids", async (t) => {
  const order = [];
  const op = {
    attachBackend: (h) => order.push(["attach", h]),
    detachBackend: (h) => order.push(["detach", h]),
    recordActivity: () => order.push(["activity"]),
  };
  const runtime = {
    setActiveEmbeddedRun: (...a) => order.push(["set", ...a]),
    clearActiveEmbeddedRun: (...a) => order.push(["clear", ...a]),
  };
  const { fleet, play } = await acceptingFleet(t, {
    onInject: (body, { respond }) => {
      respond({ v: VERSION, status: "accepted", injectionId: "inj-9", attemptId: body.attemptId });
      play.event(play.attempt.replyTo, play.attempt.attemptId, 2, "injection", { injectionId: "inj-9", state: "committed" });
    },
  });
  const p = params({
    replyOperation: op,
    sessionFile: "/s/sess-1.jsonl",
    toolAuthorityFingerprint: "fp-1",
    terminalReplyExpectation: "required",
    taskSuggestionDeliveryMode: "gateway",
  });
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime, log: {}, params: p }).run();
  await until(() => order.some((o) => o[0] === "set"), "setActiveEmbeddedRun");
  const [attach, set] = order.filter((o) => o[0] === "attach" || o[0] === "set");
  assert.equal(attach[0], "attach", "attached to the reply operation before registration");
  const h = attach[1];
  assert.equal(set[2], h);
  assert.deepEqual(set.slice(0, 2).concat(set.slice(3)), ["set", "sess-1", "agent:main:unit", "/s/sess-1.jsonl", "main"]);
  assert.deepEqual([h.runId, h.toolAuthorityFingerprint, h.terminalReplyExpectation, h.taskSuggestionDeliveryMode, h.sourceReplyDeliveryMode], ["run-1", "fp-1", "required", "gateway", undefined]);
  await until(() => h.messageInjectionV2.isAvailable(), "the claimed event");
  await h.messageInjectionV2.queueMessage("steer me", { waitForTranscriptCommit: true }, () => {}, "run");
  const a = play.attempt;
  const injected = play.requestsOn(`teamster.run.${a.attemptId}.inject`);
  assert.deepEqual(injected.map((b) => [b.text, b.authorityKind, b.attemptId]), [["steer me", "run", a.attemptId]]);
  play.result(a, 3, { status: "ok", assistantTexts: ["waiting", "steer me"] });
  const out = await run;
  assert.deepEqual(out.assistantTexts, ["waiting", "steer me"]);
  const tail = order.filter((o) => o[0] === "detach" || o[0] === "clear");
  assert.deepEqual(tail.map((o) => o[0]), ["detach", "clear"]);
  assert.equal(tail[0][1], h);
  assert.ok(order.some((o) => o[0] === "activity"), "fleet events count as reply-operation activity");
  assert.equal(h.messageInjectionV2.isAvailable(), false);
});

test("a registration OpenClaw refuses leaves the turn running without steering", async (t) => {
  const detached = [];
  const op = { attachBackend() {}, detachBackend: (h) => detached.push(h) };
  const runtime = { setActiveEmbeddedRun: () => { throw new Error("embedded tool authority registration does not match its attempt"); } };
  const warnings = [];
  const { fleet, play } = await acceptingFleet(t);
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime, log: { warn: (m) => warnings.push(m) }, params: params({ replyOperation: op }) }).run();
  const a = await waitAttempt(play);
  await until(() => detached.length > 0, "the refused registration");
  play.result(a, 2, { status: "ok", assistantTexts: ["fine"] });
  const out = await run;
  assert.equal(out.terminal.kind, "ok");
  assert.equal(detached.length, 1);
  assert.match(warnings.join("\n"), /steering is unavailable/);
});

test("only a one-shot CLI run releases the connection after its turn", async (t) => {
  for (const [extra, released] of [[{ oneShotCliRun: true }, true], [{ cleanupBundleMcpOnRunEnd: true }, false], [{}, false]]) {
    const { fleet, play } = await acceptingFleet(t);
    const nc = await fleet.conn();
    const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log: {}, params: params(extra) }).run();
    const a = await waitAttempt(play);
    assert.equal(fleet.activeTurns, 1);
    play.result(a, 2, { status: "ok", assistantTexts: ["x"] });
    await run;
    assert.equal(fleet.activeTurns, 0);
    assert.equal(nc.isClosed(), released, JSON.stringify(extra));
    await play.close();
    await fleet.close();
  }
});

test("host callbacks run OpenClaw's tools and report terminal outcomes", async (t) => {
  const { fleet, play } = await acceptingFleet(t);
  const observed = [];
  const tool = { name: "lookup", description: "d", parameters: { type: "object" }, execute: async (id, args) => ({ content: [{ type: "text", text: `found ${args.q}` }], details: { id } }) };
  const p = params({
    hostCapabilities: { createToolSurface: () => [tool] },
    observeToolTerminal: (o) => {
      observed.push(o);
      return { lastToolError: o.outcome === "failure" ? { toolName: o.toolName, error: "x" } : undefined, executionStarted: true };
    },
  });
  const run = new Turn({ cfg: { ...fleet.cfg, advertiseTools: true }, fleet, runtime: {}, log: {}, params: p }).run();
  const a = await waitAttempt(play);
  assert.deepEqual(a.tools, [{ name: "lookup", description: "d", inputSchema: { type: "object" } }]);
  const id = a.attemptId;
  const ok = await play.hostCall("h1", id, "tool", { callId: "call-1", name: "lookup", args: { q: "x" } });
  assert.equal(ok.status, "ok");
  assert.deepEqual(ok.result.content, [{ type: "text", text: "found x" }]);
  assert.deepEqual(ok.result.details, { id: "call-1" });
  const missing = await play.hostCall("h1", id, "tool", { callId: "call-2", name: "nope", args: {} });
  assert.equal(missing.status, "rejected");
  const term = await play.hostCall("h1", id, "toolTerminal", { callId: "call-2", name: "nope", executionStarted: false, outcome: "failure", error: { code: "invalid_request", message: "no tool" } });
  assert.deepEqual(term, { v: 1, status: "ok", lastToolError: { toolName: "nope", error: "x" } });
  assert.equal(observed[0].outcome, "failure");
  assert.equal(observed[0].failure.error, "no tool");
  const usage = await play.hostCall("h1", id, "usage", { responseId: "resp-1", outputTokens: 3 });
  assert.equal(usage.status, "ok");
  const ui = await play.hostCall("h1", id, "userInput", { question: "?" });
  assert.equal(ui.status, "rejected");
  // An assertion the turn never made is not current.
  assert.deepEqual(await play.hostCall("h1", id, "assertCurrent", { assertion: "oc-nope" }), { v: 1, status: "ok", current: false });
  assert.equal((await play.hostCall("h1", id, "assertCurrent", {})).status, "rejected");
  play.result(a, 2, { status: "ok", assistantTexts: ["done"] });
  const out = await run;
  assert.deepEqual(out.toolMetas, [{ toolName: "lookup", toolCallId: "call-1", isError: false }]);
  await flushFleet(fleet);
  await assertUnserved(play, `teamster.host.h1.${id}.tool`);
});

test("reset resets the fleet session (delete for a deleted one), waits out a running turn, and does nothing as a delegate", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  let busy = 2;
  let refuse = false;
  await play.serve("teamster.session.*", (body, { subject }) => {
    if (refuse) return { v: 1, status: "rejected", error: { code: "owner_only", message: "not the owner" } };
    if (subject === "teamster.session.reset" && body.sessionKey === "agent:main:busy" && busy-- > 0) {
      return { v: 1, status: "rejected", error: { code: "session_busy", message: "a turn holds the session" } };
    }
    if (body.sessionKey === "agent:main:gone") return { v: 1, status: "ok", noRecord: true };
    return { v: 1, status: "ok" };
  });
  const fleet = pluginFleet(t, nats, CFG);
  const logs = [];
  const log = { info: (m) => logs.push(m), debug: (m) => logs.push(m) };
  const harness = createTeamsterHarness({ cfg: fleet.cfg, fleet, log, logger: log });
  await harness.reset({ agentId: "main", sessionId: "old", sessionKey: "agent:main:x", reason: "reset" });
  await harness.reset({ sessionKey: "agent:main:y", reason: "deleted" });
  await harness.reset({ sessionKey: "agent:main:gone", reason: "new" });
  await harness.reset({ sessionKey: "agent:main:busy", reason: "reset" });
  await harness.reset({ sessionId: "no-key", reason: "reset" }); // nothing to address
  assert.deepEqual(play.requests.map((r) => [r.subject, r.body]), [
    ["teamster.session.reset", { v: 1, sessionKey: "agent:main:x" }],
    ["teamster.session.delete", { v: 1, sessionKey: "agent:main:y" }],
    ["teamster.session.reset", { v: 1, sessionKey: "agent:main:gone" }],
    ["teamster.session.reset", { v: 1, sessionKey: "agent:main:busy" }],
    ["teamster.session.reset", { v: 1, sessionKey: "agent:main:busy" }],
    ["teamster.session.reset", { v: 1, sessionKey: "agent:main:busy" }],
  ]);
  assert.ok(logs.some((m) => /agent:main:gone reset on the fleet \(new\): it had no fleet record/.test(m)), logs.join("\n"));
  // A refusal other than session_busy throws, naming the session.
  refuse = true;
  await assert.rejects(resetSession({ cfg: fleet.cfg, fleet, log, params: { sessionKey: "agent:main:z" } }),
    (e) => e.code === "owner_only" && /session agent:main:z: not the owner/.test(e.message));
  refuse = false;
  // A delegate, bound to a gateway or not, sends nothing.
  const m = play.requests.length;
  await resetSession({ cfg: { ...fleet.cfg, gatewayId: undefined, delegatePluginId: "voice-call" }, fleet, log, params: { sessionKey: "agent:main:x" } });
  await resetSession({ cfg: { ...fleet.cfg, gatewayId: "gw-1", delegatePluginId: "voice-call" }, fleet, log, params: { sessionKey: "agent:main:x" } });
  assert.equal(play.requests.length, m);
  // A gateway with an identity sends on the identified subject, teamster.session.<op>.gateway.<gatewayId>.
  await play.serve("teamster.session.*.gateway.*", () => ({ v: 1, status: "ok" }));
  await resetSession({ cfg: { ...fleet.cfg, gatewayId: "gw-1" }, fleet, log, params: { sessionKey: "agent:main:x", reason: "deleted" } });
  assert.deepEqual(play.requests.slice(m).map((r) => [r.subject, r.body]), [["teamster.session.delete.gateway.gw-1", { v: 1, sessionKey: "agent:main:x" }]]);
});

test("userInput asks the turn's user through OpenClaw's question path and answers the fleet with the reply", async () => {
  const asked = [];
  let outcome = { status: "answered", answers: { answers: { answer: ["left"] } } };
  const p = params({ sessionKey: "agent:main:q", agentId: "main", runId: "run-q", timeoutMs: 30000 });
  const host = new HostCallbacks({ params: p, tools: async () => [], askUser: async (q) => (asked.push(q), outcome), attemptId: "a1" });
  const call = (body) => host.handle("userInput", encode({ v: 1, ...body }));
  assert.deepEqual(await call({ question: "Which way?", choices: ["left", "right"] }), { v: 1, status: "ok", answer: "left" });
  assert.equal(asked.length, 1);
  assert.deepEqual(asked[0].questions, [{ id: "answer", header: "Question", question: "Which way?", options: [{ label: "left" }, { label: "right" }] }]);
  assert.equal(asked[0].sessionKey, "agent:main:q");
  assert.equal(asked[0].runId, "run-q");
  assert.equal(asked[0].timeoutMs, 30000);
  assert.equal(asked[0].delivery, p, "the question is delivered with the attempt's own params (its host capabilities bind the answer's authority)");
  outcome = { status: "expired" };
  assert.equal((await call({ question: "?" })).error.code, "deadline_exceeded");
  outcome = { status: "cancelled" };
  assert.equal((await call({ question: "?" })).error.code, "cancelled");
  assert.equal((await call({})).error.code, "invalid_request");
  const noSdk = new HostCallbacks({ params: p, tools: async () => [] });
  assert.equal((await noSdk.handle("userInput", encode({ v: 1, question: "?" }))).status, "rejected");
});

test("a plain-text message while the fleet's harness asks is claimed as the answer, not steered", async (t) => {
  const claims = [];
  let pending = true;
  const { sent, inj } = await claimedInjector(t);
  inj.questions = { sessionKey: "agent:main:q", claim: async (c) => (claims.push(c), pending), cancel: async () => true };
  const h = inj.handle({ runId: "r" }).messageInjectionV2;
  const calls = [];
  const assertCurrent = () => {};
  const recorder = {};
  const r = await h.queueMessage("left", { isInboundUserMessage: true, userTurnTranscriptRecorder: recorder, onQueueAccepted: (a) => calls.push(a), onQueueSettled: () => calls.push("settled") }, assertCurrent, "run");
  assert.equal(r, undefined);
  assert.deepEqual(calls, [true, "settled"]);
  assert.equal(claims.length, 1);
  assert.equal(claims[0].text, "left");
  assert.equal(claims[0].sessionKey, "agent:main:q");
  assert.equal(claims[0].sourceRecorder, recorder);
  assert.deepEqual(claims[0].authority, { kind: "run", assertCurrent });
  await flushFleet(inj.fleet);
  assert.equal(sent().length, 0, "an answer is not steering");
  // The V2 handle's own claim and cancel go to the same helpers.
  assert.equal(await h.claimPendingUserInputAnswer("right", {}, assertCurrent, "source-bound"), true);
  assert.equal(claims[1].authority.kind, "source-bound");
  assert.equal(await h.cancelPendingUserInput("image-reply", assertCurrent, "run"), true);
  // No question pending: the message is steering.
  pending = false;
  const p2 = h.queueMessage("steer on", { isInboundUserMessage: true }, assertCurrent, "run");
  await until(() => sent().length === 1, "the inject request");
  inj.end();
  await p2;
});

test("finalizeSettledTurn runs one tool-less fleet operation and returns its answer; a refusal throws", async (t) => {
  const { fleet, play } = await acceptingFleet(t);
  const harness = createTeamsterHarness({ cfg: fleet.cfg, fleet, logger: {} });
  const instruction = "Produce the final user-visible answer now.";
  const p = harness.finalizeSettledTurn({ attempt: params({ prompt: instruction, disableTools: true }), settledAttempt: {} });
  const a = await waitAttempt(play);
  assert.equal(a.operation, "settled-tool-finalization");
  assert.deepEqual(a.toolsAllow, []);
  assert.equal(a.tools, undefined);
  assert.equal(a.prompt, instruction);
  play.result(a, 2, { status: "ok", assistantTexts: ["the answer"] });
  const r = await p;
  assert.deepEqual(Object.keys(r), ["assistant"]);
  assert.deepEqual(r.assistant.content, [{ type: "text", text: "the answer" }]);
  assert.equal(r.assistant.stopReason, "stop");

  const p2 = harness.finalizeSettledTurn({ attempt: params({ prompt: instruction, disableTools: true }), settledAttempt: {} });
  await until(() => play.attempts.length === 2, "the second operation");
  play.result(play.attempt, 2, { status: "error", assistantTexts: [], error: { code: "harness_unsupported_route", message: "harness codex cannot run a settled-turn finalization", sideEffects: "none" } });
  await assert.rejects(p2, (e) => e.code === "harness_unsupported_route" && /cannot run a settled-turn finalization/.test(e.message));
});

test("a result reports the tool calls the host ran as completed items", async () => {
  const { mapResult } = await import("../../src/result.js");
  const out = mapResult(params(), { status: "ok", attemptId: "a", assistantTexts: [] }, { toolMetas: [{ toolName: "x", toolCallId: "c1", isError: false }] });
  assert.deepEqual(out.itemLifecycle, { startedCount: 1, completedCount: 1, activeCount: 0 });
  assert.equal(out.currentAttemptAssistant.stopReason, "stop");
});
