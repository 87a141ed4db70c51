// The plugin's Fleet (its one NATS connection) against a real nats-server:
// requests, the registry poll of KV TEAMSTER_WORKERS, the durable result in
// TEAMSTER_RESULTS, and when the connection is released.

import assert from "node:assert/strict";
import { test } from "node:test";
import { connect as natsConnect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { REGISTRY_POLL_MS, REGISTRY_STREAM } from "../../src/fleet.js";
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

test("supports() follows the fleet's registry in KV TEAMSTER_WORKERS", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const kv = await play.workers();
  const entry = (state, id = "codex") => JSON.stringify({ v: 1, workerId: "w1", state, harnesses: [{ id, autoSelection: { providerIds: ["openai"] } }] });
  await kv.put("w1", entry("active"));
  const { f } = fleetWith(t, { routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } });
  const h = createTeamsterHarness({ cfg: f.cfg, fleet: f });
  const ctx = { provider: "fleet", modelId: "echo", modelProvider: {} };
  assert.equal(f.registrySnapshot(), null, "not connected: the registry is unknown");
  assert.match(h.supports(ctx).reason, /registry not read yet/);
  await f.conn();
  await until(() => f.registrySnapshot()?.liveManifests().length === 1, "the registry poll");
  assert.deepEqual(h.supports(ctx), { supported: true, priority: 10 });
  await kv.put("w1", entry("draining"));
  await until(() => f.registry.entries.get("w1")?.entry.state === "draining", "the draining entry");
  assert.equal(h.supports(ctx).supported, true, "a draining worker still registers");
  await kv.put("w1", entry("stopped"));
  await until(() => h.supports(ctx).supported === false, "the stopped worker");
  assert.ok(h.supports(ctx).reason.includes(`no live fleet harness at ${nats.url}`), h.supports(ctx).reason);
  await kv.put("w1", entry("active", "claude-cli"));
  await until(() => f.registrySnapshot()?.liveManifests()[0]?.id === "claude-cli", "the updated entry");
  assert.equal(h.supports(ctx).supported, false, "claude-cli is not among the route's compatible ids");
  await kv.put("w1", entry("active"));
  await until(() => h.supports(ctx).supported, "the entry back on codex");
  await kv.delete("w1");
  await until(() => f.registrySnapshot()?.liveManifests().length === 0, "the deleted entry");
  assert.equal(h.supports(ctx).supported, false);
});

test("the registry is polled every heartbeat period, read-only: delete and purge markers and vanished keys leave it", async (t) => {
  assert.equal(REGISTRY_POLL_MS, 2000, "the workers' heartbeat period (bus.HeartbeatInterval)");
  const play = await FleetPlay.connect(t, nats);
  const kv = await play.workers();
  const jsm = await jetstreamManager(play.nc);
  const entry = (id) => JSON.stringify({ v: 1, workerId: id, state: "active", harnesses: [{ id: `h-${id}` }] });
  for (const id of ["p1", "p2", "p3", "p4"]) await kv.put(id, entry(id));
  let clock = 1_000_000;
  const { f } = fleetWith(t, {});
  f.registry.now = () => clock;
  await f.conn();
  const keys = () => [...(f.registrySnapshot()?.entries.keys() ?? [])].filter((k) => k.startsWith("p")).sort();
  await until(() => keys().length === 4, "the four entries");
  await kv.delete("p1"); // a DEL marker stays in the stream
  await kv.purge("p2"); // a PURGE marker
  await jsm.streams.purge(REGISTRY_STREAM, { filter: "$KV.TEAMSTER_WORKERS.p3" }); // gone, as the bucket's TTL removes a key
  await until(() => keys().join() === "p4", "only p4 left", 5000);
  // A revision read again is not a heartbeat: the entry ages by the time its
  // revision was first seen, and a new revision makes it fresh again.
  const live = () => f.registrySnapshot()?.liveManifests().map((m) => m.id) ?? [];
  assert.ok(live().includes("h-p4"));
  clock += 11_000;
  await new Promise((r) => setTimeout(r, 200)); // several polls of the same revision
  assert.ok(!live().includes("h-p4"), "no heartbeat for 11 s: not live");
  await kv.put("p4", entry("p4"));
  await until(() => live().includes("h-p4"), "the new heartbeat");
  // The plugin created no consumer on the registry's stream (a KV watch would have).
  assert.deepEqual(await jsm.consumers.list(REGISTRY_STREAM).next(), []);
  for (const id of ["p4"]) await kv.delete(id);
});

test("without a registry bucket the registry stays unknown and is read once the bucket exists", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const jsm = await jetstreamManager(play.nc);
  await jsm.streams.delete(REGISTRY_STREAM).catch(() => {});
  const { f } = fleetWith(t, {});
  await f.conn();
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(f.registrySnapshot(), null, "stream not found: unknown, so supports() lets the fleet decide at submit");
  const kv = await play.workers();
  await kv.put("late", JSON.stringify({ v: 1, workerId: "late", state: "active", harnesses: [{ id: "codex" }] }));
  await until(() => f.registrySnapshot()?.entries.has("late"), "the registry once the bucket exists");
  await kv.delete("late");
});

test("getResult reads the durable result in TEAMSTER_RESULTS; null while there is none", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const { f } = fleetWith(t);
  const id = "01DURABLE0000000000000000A";
  const r = { v: 1, attemptId: id, status: "error", assistantTexts: [], error: { code: "worker_lost", message: "gone", sideEffects: "possible" } };
  await play.storeResult({ ...r, attemptId: "01OTHER000000000000000000A", status: "ok", error: undefined });
  assert.equal(await f.getResult(id), null);
  await play.storeResult(r);
  assert.deepEqual(await f.getResult(id), r);
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
