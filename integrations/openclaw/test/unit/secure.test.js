// The plugin as a gateway with an identity (gatewayId, an NKey, the server
// verified over TLS) against a real nats-server that enforces a gateway's
// shipped permissions (test/support/nats.js gatewayPermissions): it
// subscribes only under _INBOX.gateway.<id> and teamster.host.<id>, publishes
// only the identified forms of its requests (<subject>.gateway.<id>), reads
// its own durable results and the fleet's harnesses through the routers
// (teamster.get.result / teamster.get.harnesses .gateway.<id>), and makes no
// JetStream API call at all. The test's FleetPlay (router and worker)
// connects as an unrestricted "admin" user.

import assert from "node:assert/strict";
import { test } from "node:test";
import { connect as natsConnect, createInbox } from "@nats-io/transport-node";
import { connectOptions } from "../../src/fleet.js";
import { Turn, createTeamsterHarness, resetSession } from "../../src/harness.js";
import { VERSION, encode } from "../../src/wire.js";
import { FleetPlay, pluginFleet, secureServerConfig, until, useNatsServer } from "../support/nats.js";
import { params } from "../support/params.js";

const nats = useNatsServer(() => ({ secure: secureServerConfig({ gateways: ["g1", "g2"] }) }));
const ROUTES = { fleet: { provider: "openai", compatibleIds: ["codex"] } };

/** gatewayConfig is the plugin config of gateway id, logging in with seedOf's NKey. */
function gatewayConfig(id, seedOf = id, extra = {}) {
  return {
    natsUrl: nats.url,
    gatewayId: id,
    nkeyFile: nats.secure.seedFile(`gateway-${seedOf}`),
    tlsCaFile: nats.secure.tls.ca,
    settlementTimeoutMs: 200,
    resultPollMs: 50,
    requestTimeoutMs: 1000,
    advertiseTools: false,
    routes: ROUTES,
    ...extra,
  };
}

/** A logger that keeps what the plugin warns about. */
function recorder() {
  const warns = [];
  return { warns, info() {}, debug() {}, warn: (m) => warns.push(m) };
}

test("a gateway runs a turn under its shipped permissions: own inbox, own submit subject, own host id, registry and result read through the routers", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const reg = await play.registry();
  await reg.put("w1", { v: 1, workerId: "w1", state: "active", harnesses: [{ id: "codex", autoSelection: { providerIds: ["openai"] } }] });
  // The router accepts and the worker claims; the result is only stored
  // durably (no result event), so the turn reads it with getResult.
  await play.router(
    (body, { respond }) => {
      respond({ v: VERSION, status: "accepted", attemptId: body.attemptId, harnessId: "codex" });
      play.event(body.replyTo, body.attemptId, 1, "claimed", { workerId: "w1", harnessId: "codex", fence: "e:1" });
      play.event(body.replyTo, body.attemptId, 2, "partial", { text: "hi" });
    },
    { subject: "teamster.submit.gateway.*" },
  );
  await play.worker();
  const log = recorder();
  const fleet = pluginFleet(t, nats, gatewayConfig("g1"), { logger: log });
  const h = createTeamsterHarness({ cfg: fleet.cfg, fleet });
  const ctx = { provider: "fleet", modelId: "echo", modelProvider: {} };
  await fleet.conn();
  await until(() => fleet.registrySnapshot()?.liveManifests().length === 1, "the registry, read with the gateway's permissions");
  assert.deepEqual(h.supports(ctx), { supported: true, priority: 10 });

  const tool = { name: "lookup", execute: async (_id, args) => ({ content: [{ type: "text", text: `found ${args.q}` }] }) };
  const partials = [];
  const run = new Turn({
    cfg: fleet.cfg, fleet, runtime: {}, log,
    params: params({ hostCapabilities: { createToolSurface: () => [tool] }, onPartialReply: (x) => partials.push(x.text) }),
  }).run();
  await until(() => play.attempt, "the attempt");
  const a = play.attempt;
  assert.deepEqual(play.requests.map((r) => r.subject), ["teamster.submit.gateway.g1"]);
  assert.match(a.replyTo, /^_INBOX\.gateway\.g1\.[A-Za-z0-9]+$/);
  assert.equal(a.hostId, "g1");
  // A host callback from the worker reaches the gateway on teamster.host.g1.<attemptId>.
  const rep = await play.hostCall("g1", a.attemptId, "tool", { callId: "c1", name: "lookup", args: { q: "x" } });
  assert.equal(rep.status, "ok", JSON.stringify(rep));
  assert.deepEqual(rep.result.content, [{ type: "text", text: "found x" }]);
  await until(() => partials.length === 1, "the partial event on the gateway's inbox");
  await play.storeResult({ v: 1, attemptId: a.attemptId, status: "ok", assistantTexts: ["hi"], usage: { outputTokens: 1 } }, "g1");
  const out = await run;
  assert.deepEqual(out.terminal, { kind: "ok" });
  assert.deepEqual(out.assistantTexts, ["hi"]);
  // The registry and the durable result were read through the routers, on
  // the gateway's identified subjects, and the server refused nothing (a
  // JetStream API call would have been: $JS.>, $KV.> and $O.> are denied).
  assert.deepEqual([...new Set(play.reads.map((r) => r.subject))].sort(), ["teamster.get.harnesses.gateway.g1", "teamster.get.result.gateway.g1"]);
  assert.ok(play.readsOn("teamster.get.result.gateway.g1").every((b) => b.v === VERSION && b.attemptId === a.attemptId));
  assert.deepEqual(log.warns.filter((w) => /Permissions Violation/i.test(w)), []);
});

test("a gateway sends every request on its identified subject and reads only its own results", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  await play.registry();
  await play.router(undefined, { subject: "teamster.submit.gateway.*" });
  await play.worker({
    onCancel: (body, { respond }) => {
      respond({ v: VERSION, status: "ok" });
      play.result(play.attempt, 2, { status: "cancelled", error: { code: "cancelled", message: body.reason, sideEffects: "possible" } });
    },
  });
  await play.serve("teamster.session.*.gateway.*", () => ({ v: VERSION, status: "ok" }));
  const log = recorder();
  const fleet = pluginFleet(t, nats, gatewayConfig("g1"), { logger: log });

  // An abort cancels on teamster.run.<attemptId>.cancel.gateway.g1.
  const ac = new AbortController();
  const run = new Turn({ cfg: fleet.cfg, fleet, runtime: {}, log, params: params({ abortSignal: ac.signal }) }).run();
  await until(() => play.attempt, "the attempt");
  const a = play.attempt;
  ac.abort();
  const out = await run;
  assert.equal(out.terminal.kind, "aborted");
  assert.equal(play.requestsOn(`teamster.run.${a.attemptId}.cancel.gateway.g1`).length, 1);
  assert.equal(play.requestsOn(`teamster.run.${a.attemptId}.cancel`).length, 0);

  // A session reset goes on teamster.session.reset.gateway.g1.
  await resetSession({ cfg: fleet.cfg, fleet, log, params: { sessionKey: "agent:main:x", reason: "reset" } });
  assert.deepEqual(play.requestsOn("teamster.session.reset.gateway.g1"), [{ v: VERSION, sessionKey: "agent:main:x" }]);

  // The durable result of g1's attempt X is teamster.result.g1.X: another
  // gateway's result under the same id and the unnamed tenant's are not it.
  const id = "01TENANT00000000000000000X";
  const r = { v: 1, attemptId: id, status: "ok", assistantTexts: ["mine"], usage: { outputTokens: 1 } };
  await play.storeResult({ ...r, assistantTexts: ["g2's"] }, "g2");
  await play.storeResult({ ...r, assistantTexts: ["nobody's"] });
  assert.equal(await fleet.getResult(id), null);
  await play.storeResult(r, "g1");
  assert.deepEqual(await fleet.getResult(id), r);
  assert.deepEqual(log.warns.filter((w) => /Permissions Violation/i.test(w)), []);

  assert.deepEqual(play.readsOn("teamster.get.result.gateway.g1").filter((b) => b.attemptId === id), [{ v: VERSION, attemptId: id }, { v: VERSION, attemptId: id }]);

  // The plain subjects, another gateway's reads, the result subjects and the
  // whole JetStream API (even of its own results: JetStream would store its
  // answer wherever a stream captures the reply subject) are refused to the
  // gateway.
  const nc = await natsConnect({ ...connectOptions(fleet.cfg), name: "unit-plain" });
  t.after(() => nc.close());
  for (const subject of [
    `teamster.run.${a.attemptId}.cancel`,
    "teamster.session.reset",
    "teamster.get.result",
    "teamster.get.harnesses",
    "teamster.get.result.gateway.g2",
    "teamster.get.harnesses.gateway.g2",
    `teamster.result.g1.${id}`,
    "$JS.API.INFO",
    `$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.g1.${id}`,
    `$JS.API.DIRECT.GET.TEAMSTER_RESULTS.teamster.result.g2.${id}`,
    "$JS.API.DIRECT.GET.TEAMSTER_RESULTS",
    "$JS.API.STREAM.MSG.GET.TEAMSTER_RESULTS",
    "$JS.API.STREAM.INFO.TEAMSTER_RESULTS",
    "$JS.API.STREAM.INFO.KV_TEAMSTER_WORKERS",
    "$JS.API.DIRECT.GET.KV_TEAMSTER_WORKERS.$KV.TEAMSTER_WORKERS.w1",
    "$JS.API.CONSUMER.CREATE.KV_TEAMSTER_WORKERS",
    "$KV.TEAMSTER_WORKERS.w1",
    "$O.TEAMSTER_NATIVE_STATE.x",
  ]) {
    await assert.rejects(nc.request(subject, encode({ v: VERSION }), { timeout: 1000 }), /Permissions Violation for Publish/, subject);
  }
});

test("the permissions bite: the default _INBOX and another gateway's submit subject are refused", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  await play.registry();
  await play.router(undefined, { subject: "teamster.submit.gateway.*" });
  const opts = connectOptions(pluginFleet(t, nats, gatewayConfig("g1")).cfg);
  // Without the gateway's inbox prefix, no reply reaches it.
  const plain = await natsConnect({ ...opts, inboxPrefix: undefined, name: "unit-no-prefix" });
  t.after(() => plain.close());
  await assert.rejects(plain.request("teamster.submit.gateway.g1", new TextEncoder().encode("{}"), { timeout: 1000 }), /Permissions Violation for Subscription to "_INBOX\.[A-Za-z0-9]+\.\*"/);
  // Under it, a subscription under the default _INBOX is refused.
  const nc = await natsConnect({ ...opts, name: "unit-inbox" });
  t.after(() => nc.close());
  const errors = [];
  (async () => {
    for await (const s of nc.status()) if (s.type === "error") errors.push(s.error?.message ?? "");
  })().catch(() => {});
  nc.subscribe(createInbox());
  await nc.flush();
  await until(() => errors.some((m) => /Permissions Violation for Subscription to "?_INBOX\./i.test(m)), "the refused subscription");
  // Gateway g2's NKey configured as g1: g1's inbox is not g2's to read...
  const asG1 = pluginFleet(t, nats, gatewayConfig("g1", "g2", { requestTimeoutMs: 500 }));
  const refused = await createTeamsterHarness({ cfg: asG1.cfg, fleet: asG1 }).runAttempt(params());
  assert.equal(refused.terminal.kind, "failed");
  assert.match(refused.terminal.error.message, /Permissions Violation for Subscription to "_INBOX\.gateway\.g1\./);
  // ...and with g2's own inbox, g1's submit subject is not g2's to publish:
  // the server drops the submit, certainly undelivered.
  const log = recorder();
  const impostor = pluginFleet(t, nats, gatewayConfig("g1", "g2", { requestTimeoutMs: 500, inboxPrefix: "_INBOX.gateway.g2" }), { logger: log });
  const out = await createTeamsterHarness({ cfg: impostor.cfg, fleet: impostor }).runAttempt(params());
  assert.equal(out.terminal.kind, "failed");
  assert.match(out.terminal.error.message, /refused the request on teamster\.submit\.gateway\.g1: Permissions Violation for Publish to "teamster\.submit\.gateway\.g1"/);
  await until(() => log.warns.some((w) => /Permissions Violation for Publish to "?teamster\.submit\.gateway\.g1/i.test(w)), "the plugin's warning naming the refused subject");
  assert.equal(play.attempts.length, 0, "no router saw the impostor's submit");
});

test("the server is verified and the gateway authenticated: without the CA, without its seed file or with a wrong credential it fails closed naming the URL", async (t) => {
  const noCa = pluginFleet(t, nats, gatewayConfig("g1", "g1", { tlsCaFile: undefined, connectTimeoutMs: 2000 }));
  assert.equal(connectOptions(noCa.cfg).tls?.caFile, undefined);
  await assert.rejects(noCa.conn(), (e) => e.message.includes(`cannot reach the fleet at ${nats.url}`) && /certificate|self.signed|verify/i.test(e.message), "system roots do not know the test CA");
  const noSeed = pluginFleet(t, nats, { ...gatewayConfig("g1"), nkeyFile: "/nonexistent/gateway-g1.nk", connectTimeoutMs: 2000 });
  await assert.rejects(noSeed.conn(), (e) => e.message.includes(`cannot reach the fleet at ${nats.url}`) && e.message.includes("cannot read nkeyFile /nonexistent/gateway-g1.nk"), "a missing seed file is named");
  const wrongKey = pluginFleet(t, nats, { ...gatewayConfig("g1"), nkeyFile: undefined, token: "nope", connectTimeoutMs: 2000 });
  await assert.rejects(wrongKey.conn(), (e) => e.message.includes(`cannot reach the fleet at ${nats.url}`) && /authoriz/i.test(e.message));
});
