// The plugin's Fleet (its one NATS connection) against a real nats-server:
// requests, the registry poll (teamster.get.harnesses), the durable result
// read (teamster.get.result), both answered by the test's routers, and when
// the connection is released.

import assert from "node:assert/strict";
import { test } from "node:test";
import { connect as natsConnect } from "@nats-io/transport-node";
import { REGISTRY_POLL_MS } from "../../src/fleet.js";
import { createTeamsterHarness } from "../../src/harness.js";
import { createPlugin } from "../../src/plugin.js";
import { freePort } from "../support/env.js";
import { FleetPlay, flushFleet, pluginFleet, until, useNatsServer } from "../support/nats.js";

const nats = useNatsServer();

/** fleetWith: the plugin's Fleet on the test's server, counting the real connections it opens. */
function fleetWith(t, raw = {}) {
  const conns = [];
  const f = pluginFleet(t, nats, raw, {
    connect: async (o) => {
      const nc = await natsConnect(o);
      conns.push(nc);
      return nc;
    },
  });
  return { f, conns };
}

test("request runs beforeSend after the connection is ready and right before the publish", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  await play.serve("teamster.run.A.inject", () => ({ v: 1, status: "accepted", injectionId: "i1" }));
  const { f, conns } = fleetWith(t);
  const seen = [];
  const rep = await f.request("teamster.run.A.inject", { v: 1, text: "x" }, 1000, {
    beforeSend: () => seen.push([conns.length, conns[0]?.isClosed(), play.requests.length]),
  });
  assert.deepEqual(rep, { v: 1, status: "accepted", injectionId: "i1" });
  assert.deepEqual(seen, [[1, false, 0]], "connected, and nothing published yet");
  assert.deepEqual(play.requests, [{ subject: "teamster.run.A.inject", body: { v: 1, text: "x" } }]);
  await assert.rejects(f.request("teamster.run.A.inject", { v: 1 }, 1000, { beforeSend: () => { throw new Error("revoked"); } }), /revoked/);
  await flushFleet(f);
  await play.flush();
  assert.equal(play.requests.length, 1, "a throwing beforeSend publishes nothing");
});

test("a request without a reply is uncertain; no responders is certain", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  await play.serve("s.x", () => undefined); // received, never answered
  const { f } = fleetWith(t);
  await assert.rejects(f.request("s.x", { v: 1 }, 50), (e) => e.uncertain === true && /no reply on s\.x/.test(e.message) && /within 50 ms/.test(e.message) && e.message.includes(nats.url));
  assert.equal(play.requests.length, 1, "the unanswered request was received");
  await assert.rejects(f.request("s.y", { v: 1 }, 2000), (e) => e.uncertain === undefined && /nobody is serving s\.y/.test(e.message) && e.message.includes(nats.url));
});

test("releaseIfIdle ends the connection only when no turn runs on it", async (t) => {
  const { f, conns } = fleetWith(t);
  const nc = await f.conn();
  const drains = [];
  const drain = nc.drain.bind(nc);
  nc.drain = () => {
    drains.push(nc.isClosed());
    return drain();
  };
  f.turnStarted();
  await f.releaseIfIdle();
  assert.equal(nc.isClosed(), false, "a running turn keeps the connection");
  f.turnEnded();
  await f.releaseIfIdle();
  assert.equal(nc.isClosed(), true);
  assert.equal(await nc.closed(), undefined, "closed without an error");
  assert.deepEqual(drains, [false], "drained, not dropped");
  assert.equal(conns.length, 1);
  // The next turn connects again.
  const again = await f.conn();
  assert.notEqual(again, nc);
  assert.equal(conns.length, 2);
});

test("the shared connection closes when the last registration drops it", async (t) => {
  const { f } = fleetWith(t);
  const nc = await f.conn();
  const a = {};
  const b = {};
  f.hold(a);
  f.hold(b);
  await f.drop(a);
  await f.drop(a); // a second drop of one registration changes nothing
  assert.equal(nc.isClosed(), false);
  await f.drop(b);
  assert.equal(nc.isClosed(), true);
  await assert.rejects(f.conn(), /is closed/);
});

/** A logger that keeps what the plugin logs at debug. */
function debugRecorder() {
  const debugs = [];
  return { debugs, info() {}, warn() {}, debug: (m) => debugs.push(m) };
}

test("supports() follows the harnesses the fleet's routers report", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const reg = await play.registry();
  const entry = (state, id = "codex") => ({ v: 1, workerId: "w1", state, harnesses: [{ id, autoSelection: { providerIds: ["openai"] } }] });
  await reg.put("w1", entry("active"));
  const { f } = fleetWith(t, { routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } });
  const h = createTeamsterHarness({ cfg: f.cfg, fleet: f });
  const ctx = { provider: "fleet", modelId: "echo", modelProvider: {} };
  assert.equal(f.registrySnapshot(), null, "not connected: the registry is unknown");
  assert.match(h.supports(ctx).reason, /registry not read yet/);
  await f.conn();
  await until(() => f.registrySnapshot()?.liveManifests().length === 1, "the registry poll");
  assert.deepEqual(h.supports(ctx), { supported: true, priority: 10 });
  await reg.put("w1", entry("draining"));
  await new Promise((r) => setTimeout(r, 150)); // a few polls
  assert.equal(h.supports(ctx).supported, true, "a draining worker still registers");
  await reg.put("w1", entry("stopped"));
  await until(() => h.supports(ctx).supported === false, "the stopped worker");
  assert.ok(h.supports(ctx).reason.includes(`no live fleet harness at ${nats.url}`), h.supports(ctx).reason);
  await reg.put("w1", entry("active", "claude-cli"));
  await until(() => f.registrySnapshot()?.liveManifests()[0]?.id === "claude-cli", "the updated entry");
  assert.equal(h.supports(ctx).supported, false, "claude-cli is not among the route's compatible ids");
  await reg.put("w1", entry("active"));
  await until(() => h.supports(ctx).supported, "the entry back on codex");
  await reg.delete("w1");
  await until(() => f.registrySnapshot()?.liveManifests().length === 0, "the deleted entry");
  assert.equal(f.registrySnapshot().known, true, "an empty fleet is known, not unknown");
  assert.equal(h.supports(ctx).supported, false);
});

test("the registry is polled every heartbeat period with teamster.get.harnesses, each answer replacing the cached manifests", async (t) => {
  assert.equal(REGISTRY_POLL_MS, 2000, "the workers' heartbeat period (bus.HeartbeatInterval)");
  const play = await FleetPlay.connect(t, nats);
  const reg = await play.registry();
  const entry = (id, harnesses = [{ id: `h-${id}` }]) => ({ v: 1, workerId: id, state: "active", harnesses });
  for (const id of ["p1", "p2"]) await reg.put(id, entry(id));
  await reg.put("p3", entry("p3", [{ id: "h-p3" }, { noId: true }, null, "codex"]));
  let clock = 1_000_000;
  const { f } = fleetWith(t, {});
  f.registry.now = () => clock;
  await f.conn();
  const live = () => (f.registrySnapshot()?.liveManifests().map((m) => m.id) ?? []).sort();
  await until(() => live().join() === "h-p1,h-p2,h-p3", "the three workers' manifests (the malformed ones dropped)");
  const reads = play.reads.length;
  await until(() => play.reads.length >= reads + 3, "three more polls");
  assert.deepEqual([...new Set(play.reads.map((r) => r.subject))], ["teamster.get.harnesses"], "no gateway id: the plain subject");
  assert.deepEqual(play.reads.at(-1).body, { v: 1 });
  await reg.delete("p1");
  await reg.delete("p2");
  await until(() => live().join() === "h-p3", "only p3 left");
  // Each successful poll stamps the list with this process's clock: a later
  // poll refreshes it, and a list not refreshed for the registry's TTL is stale.
  clock += 11_000;
  await until(() => f.registry.seenAt === clock, "a poll after the clock moved");
  assert.deepEqual(live(), ["h-p3"], "refreshed by the poll");
  f.registry.now = () => clock + 10_000;
  assert.deepEqual(live(), [], "a list older than the TTL counts as empty");
});

test("a gateway with an identity polls teamster.get.harnesses.gateway.<gatewayId>", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const reg = await play.registry();
  await reg.put("w1", { v: 1, workerId: "w1", state: "active", harnesses: [{ id: "codex" }] });
  const { f } = fleetWith(t, { gatewayId: "gw-h" });
  await f.conn();
  await until(() => f.registrySnapshot()?.liveManifests().length === 1, "the registry poll");
  assert.deepEqual([...new Set(play.reads.map((r) => r.subject))], ["teamster.get.harnesses.gateway.gw-h"]);
});

test("a failed registry poll resets the registry, logged once per distinct error, until a poll succeeds", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const log = debugRecorder();
  const { f } = pluginFleetWithLog(t, log);
  await f.conn();
  // No router answers teamster.get.harnesses yet.
  await until(() => log.debugs.length === 1, "the failed poll's debug line");
  await new Promise((r) => setTimeout(r, 200)); // several more failed polls
  assert.equal(f.registrySnapshot(), null, "no router: unknown, so supports() lets the fleet decide at submit");
  assert.equal(log.debugs.length, 1, "the same error is logged once");
  assert.ok(log.debugs[0].includes(`reading the fleet's registry (teamster.get.harnesses) at ${nats.url} failed`) && log.debugs[0].includes("nobody is serving teamster.get.harnesses"), log.debugs[0]);
  const reg = await play.registry();
  await reg.put("w1", { v: 1, workerId: "w1", state: "active", harnesses: [{ id: "codex" }] });
  await until(() => f.registrySnapshot()?.liveManifests().length === 1, "the registry once a router answers");
  // A rejection resets it as well.
  play.rejectReads.harnesses = { code: "internal", message: "the registry is unavailable" };
  await until(() => f.registrySnapshot() === null, "the reset after the rejected poll");
  assert.equal(f.registry.liveManifests().length, 0, "reset: nothing cached");
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(log.debugs.length, 2, "one more line, for the new error");
  assert.match(log.debugs[1], /the fleet rejected the request on teamster\.get\.harnesses at .*: internal: the registry is unavailable/);
  play.rejectReads.harnesses = null;
  await until(() => f.registrySnapshot()?.liveManifests().length === 1, "the registry read again");
  // A malformed answer fails the poll too.
  await play.close();
  const odd = await FleetPlay.connect(t, nats);
  await odd.serve("teamster.get.harnesses", () => ({ v: 1, status: "ok", harnesses: { id: "codex" } }));
  await until(() => /has no harnesses list/.test(log.debugs.at(-1)), "the malformed answer's debug line");
  assert.equal(f.registrySnapshot(), null, "a malformed answer resets the registry");
});

/** pluginFleetWithLog: the plugin's Fleet on the test's server with logger log. */
function pluginFleetWithLog(t, log, raw = {}) {
  return { f: pluginFleet(t, nats, raw, { logger: log }) };
}

test("getResult reads the durable result through the routers (teamster.get.result); null while there is none", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const { f } = fleetWith(t);
  const id = "01DURABLE0000000000000000A";
  const r = { v: 1, attemptId: id, status: "error", assistantTexts: [], error: { code: "worker_lost", message: "gone", sideEffects: "possible" } };
  await play.storeResult({ ...r, attemptId: "01OTHER000000000000000000A", status: "ok", error: undefined });
  assert.equal(await f.getResult(id), null);
  await play.storeResult(r);
  assert.deepEqual(await f.getResult(id), r);
  assert.deepEqual(play.readsOn("teamster.get.result"), [{ v: 1, attemptId: id }, { v: 1, attemptId: id }]);
  await assert.rejects(f.getResult("a.b"), (e) => e.code === "invalid_request" && /attemptId/.test(e.message), "an attempt id that is no id is not asked");
});

test("getResult of a gateway asks teamster.get.result.gateway.<gatewayId> and gets its own tenant's result; no router is an error", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const { f } = fleetWith(t, { gatewayId: "gw-r" });
  const id = "01GATEWAY0000000000000000A";
  const r = { v: 1, attemptId: id, status: "ok", assistantTexts: ["mine"], usage: { outputTokens: 1 } };
  await play.storeResult({ ...r, assistantTexts: ["the unnamed tenant's"] });
  await play.storeResult({ ...r, assistantTexts: ["another gateway's"] }, "gw-other");
  assert.equal(await f.getResult(id), null);
  await play.storeResult(r, "gw-r");
  assert.deepEqual(await f.getResult(id), r);
  assert.deepEqual([...new Set(play.reads.filter((x) => x.subject.startsWith("teamster.get.result")).map((x) => x.subject))], ["teamster.get.result.gateway.gw-r"]);
  assert.deepEqual(play.readsOn("teamster.get.result.gateway.gw-r"), [{ v: 1, attemptId: id }, { v: 1, attemptId: id }]);
  // Without a router nobody answers: an error, not "no result".
  await play.close();
  await assert.rejects(f.getResult(id), (e) => e.code === "internal" && e.message.includes(`nobody is serving teamster.get.result.gateway.gw-r at ${nats.url}`));
});

test("a rejected result read, a malformed reply or another attempt's result is an error, not \"no result\"", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const { f } = fleetWith(t, { gatewayId: "gw-x" });
  const id = "01REJECTED000000000000000A";
  await play.storeResult({ v: 1, attemptId: id, status: "ok", assistantTexts: ["x"] }, "gw-x");
  play.rejectReads.result = { code: "internal", message: "the results stream is unavailable" };
  await assert.rejects(f.getResult(id), (e) => e.code === "internal" &&
    e.message === `teamster: the fleet rejected reading the durable result of ${id} (teamster.get.result.gateway.gw-x) at ${nats.url}: internal: the results stream is unavailable`);
  play.rejectReads.result = { code: "invalid_request", message: "attemptId is not an id" };
  await assert.rejects(f.getResult(id), (e) => e.code === "invalid_request" && e.message.includes("attemptId is not an id"));
  play.rejectReads.result = null;
  assert.equal((await f.getResult(id)).assistantTexts[0], "x");
  await play.close();

  // Routers that answer wrongly.
  const odd = await FleetPlay.connect(t, nats);
  let reply = null;
  await odd.serve("teamster.get.result.gateway.*", () => reply);
  const fails = async (rep, re) => {
    reply = rep;
    await assert.rejects(f.getResult(id), (e) => e.code === "internal" && re.test(e.message), JSON.stringify(rep));
  };
  await fails({ v: 1, status: "ok", result: { v: 1, attemptId: "01SOMEONEELSE000000000000A", status: "ok", assistantTexts: [] } }, /carries the result of attempt 01SOMEONEELSE000000000000A/);
  await fails({ v: 1, status: "ok", result: { v: 1, attemptId: id, status: "finished" } }, /result status "finished"/);
  await fails({ v: 1, status: "ok", result: { v: 1, attemptId: id, status: "error", assistantTexts: [] } }, /carries an error with a known code/);
  await fails({ v: 1, status: "ok", result: "done" }, /not a JSON object/);
  await fails({ v: 1, status: "accepted" }, /reply status "accepted"/);
  await fails({ v: 1, status: "rejected" }, /rejected reading .*: internal: no error given/);
  reply = { v: 1, status: "ok", result: null };
  assert.equal(await f.getResult(id), null, "a null result is none");
});

test("a plugin registered twice keeps one connection until both registrations are gone", async () => {
  const harnesses = [];
  const services = [];
  // A URL where nothing listens: nothing connects; the test watches the fleet object.
  const deadUrl = `nats://127.0.0.1:${await freePort()}`;
  const api = () => ({
    pluginConfig: { natsUrl: deadUrl, hostId: "h9", connectTimeoutMs: 2000 },
    registerAgentHarness: (h) => harnesses.push(h),
    registerService: (s) => services.push(s),
  });
  const plugin = createPlugin({});
  plugin.register(api());
  plugin.register(api());
  assert.equal(harnesses.length, 2);
  // Disposing the first registration's harness must not close the fleet the
  // second registration uses.
  await harnesses[0].dispose();
  const down = await harnesses[1].runAttempt({ sessionId: "s", sessionKey: "k", provider: "fleet", modelId: "m", prompt: "x" });
  assert.ok(down.terminal.error.message.includes(`cannot reach the fleet at ${deadUrl}`), down.terminal.error.message);
  await services[1].stop();
  await harnesses[1].dispose();
  const closed = await harnesses[1].runAttempt({ sessionId: "s", sessionKey: "k", provider: "fleet", modelId: "m", prompt: "x" });
  assert.ok(closed.terminal.error.message.includes(`connection to ${deadUrl} is closed`), closed.terminal.error.message);
});
