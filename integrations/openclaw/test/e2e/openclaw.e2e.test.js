// End to end with the real OpenClaw (pinned in .tools/, Node.js 24) and a
// local teamster fleet (`teamster dev`, built from this repository): one
// loopback gateway with this plugin runs every gateway turn, its text coming
// from the scripted harness on the fleet's workers; `openclaw agent exec` runs
// headless turns in fresh processes.
//
// Speed: OpenClaw processes are slow to start (tens of seconds on two busy
// cores), so the suite starts as few as it can and overlaps them. One fleet
// and one gateway serve every test; the gateway starts while Go builds the
// fleet; both `agent exec` runs (fleet up, and a NATS URL nobody serves)
// start in before() and their tests collect them. Gateway calls go through
// OpenClaw's gateway client in this process (the client behind `openclaw
// gateway call`); one turn goes through the `openclaw agent` CLI.
//
// Install: each OpenClaw home (the gateway's, and one per `agent exec`) gets
// the plugin as the README installs it: `openclaw plugins install -l
// <plugin dir>` first, then the plugin's config added to the config file that
// the install wrote (install.e2e.test.js checks the install steps themselves).
// The three installs run side by side while Go builds the fleet.
//
// Security: the fleet runs as `teamster dev --secure <dir>` (credentials
// generated into the test's folder, NATS over TLS with the production
// permissions), and every OpenClaw home configures the plugin as a gateway of
// its own: the gateway as gatewayId gateway-1, the `agent exec` homes as
// exec-1, each with its NKey seed and the fleet's CA. TEAMSTER_E2E_INSECURE=1
// runs a plain `teamster dev` and the plugin without an identity instead.
//
// Prerequisites (scripts/deps.sh installs the first two; the test fails, never
// skips, when one is missing): .tools/node24, .tools/openclaw, Go, redis-server.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, before, test } from "node:test";
import {
  OWNER_PROFILE, Proc, buildTeamster, cliEnv, e2eSecure, fleetCredentials, fleetUrl, freePort, gatewayClient, gatewayIdentity, installPlugin, node24,
  openclawEntry, openclawEnv, operatorClient, pluginDir, readJson, requireFile, startFleet, tempDir,
} from "../support/env.js";

const TOKEN = "teamster-e2e-token";
const seamsDir = join(pluginDir, "test/fixtures/seams");
const STEER = "steer: turn left at the lighthouse";
// The fleet identities of the OpenClaw processes (under --secure).
const GATEWAY_ID = "gateway-1";
const EXEC_ID = "exec-1";
let work, fleet, gateway, gatewayPort, natsUrl, deadNatsUrl, gwEnv, bin, rpc, execOk, execDown, gatewayReady, cliTurn, secureDir, creds;
const suiteStart = Date.now();
const since = () => `${((Date.now() - suiteStart) / 1000).toFixed(1)} s`;

/** oc starts one OpenClaw CLI command. */
function oc(args, env) {
  return new Proc(node24, [openclawEntry, ...args], { env, cwd: work });
}

/**
 * setUpHome writes an OpenClaw config without the plugin, installs the
 * plugin into that home with `openclaw plugins install -l` (which adds the
 * load path, enables the plugin and records the install in the home's state),
 * then adds the plugin's config to the file the install wrote: the README's
 * order, so that OpenClaw knows the plugin before it sees its settings.
 */
async function setUpHome(cfgPath, env, config) {
  const { teamster, ...entries } = config.plugins.entries;
  writeFileSync(cfgPath, JSON.stringify({ ...config, plugins: { ...config.plugins, entries } }, null, 2));
  const r = await installPlugin(pluginDir, env, { cwd: work });
  assert.equal(r.code, 0, `openclaw plugins install -l ${pluginDir} failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
  const installed = readJson(cfgPath);
  assert.deepEqual(installed.plugins?.load?.paths, [pluginDir], "the install linked the plugin folder");
  assert.equal(installed.plugins.entries?.teamster?.enabled, true, "the install enabled the plugin");
  installed.plugins.entries.teamster = { ...installed.plugins.entries.teamster, config: teamster.config };
  writeFileSync(cfgPath, JSON.stringify(installed, null, 2));
}

/**
 * addSeamsPlugin loads the test's fixture plugin (test/fixtures/seams: a
 * tool, a tool-result middleware, an agent_end hook) into the gateway beside
 * teamster: a load path, allowed and explicitly enabled (OpenClaw lets only
 * such a plugin register a middleware), with conversation access (agent_end).
 */
function addSeamsPlugin(cfgPath) {
  const c = readJson(cfgPath);
  c.plugins.load.paths.push(seamsDir);
  c.plugins.allow.push("seams");
  c.plugins.entries.seams = { enabled: true, hooks: { allowConversationAccess: true } };
  writeFileSync(cfgPath, JSON.stringify(c, null, 2));
}

/**
 * exec installs the plugin into its own home (no shared state with the
 * gateway), then, once `ready` resolves, runs `openclaw agent exec`; it
 * returns Proc.done()'s result.
 */
async function exec(name, url, prompt, ready) {
  const home = join(work, `${name}-home`);
  mkdirSync(home, { recursive: true });
  const cfg = join(work, `${name}.json`);
  const c = openclawConfig(url, 0, gatewayIdentity(creds, EXEC_ID));
  delete c.gateway;
  const env = openclawEnv({ HOME: home, OPENCLAW_CONFIG_PATH: cfg });
  await setUpHome(cfg, env, c);
  console.log(`# plugin installed into the ${name} home at ${since()}`);
  await ready;
  return oc(["agent", "exec", prompt, "--config", cfg, "--json", "--timeout", "120"], env).done(240000);
}

function textOf(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((c) => (typeof c === "string" ? c : c?.text ?? "")).join("");
}

async function history(sessionKey) {
  const h = await rpc("chat.history", { sessionKey });
  return (h?.messages ?? []).map((m) => ({ role: m.role, text: textOf(m.content) }));
}

/**
 * agentTurn runs one turn through the gateway's `agent` method (what
 * `openclaw agent` calls) and returns its final response; a turn the gateway
 * refuses outright comes back as {status: "error", error}.
 */
function agentTurn(sessionKey, message) {
  return rpc("agent", { sessionKey, message, idempotencyKey: `e2e-${Date.now()}-${Math.random().toString(36).slice(2)}` }, { expectFinal: true, timeoutMs: 180000 })
    .catch((err) => ({ status: "error", error: { message: err?.message ?? String(err), code: err?.gatewayCode } }));
}

function replyOf(final) {
  return (final?.result?.payloads ?? []).map((p) => p.text ?? "").join("\n");
}

/**
 * fleetResult reads an attempt's durable result with the teamster CLI (under
 * --secure as the gateway, which may read durable results).
 */
function fleetResult(attemptId) {
  const r = spawnSync(bin, ["result", attemptId, "--wait", "30s", "--json"], { env: cliEnv(natsUrl, creds, GATEWAY_ID), encoding: "utf8" });
  assert.equal(r.error, undefined);
  // Its exit status follows the result's (non-zero for an error result): the JSON says it.
  try {
    return JSON.parse(r.stdout);
  } catch {
    assert.fail(`teamster result ${attemptId} printed no result (exit ${r.status}):\n${r.stdout}\n${r.stderr}`);
  }
}

/** The gateway's log: its output and its log file (plugin info lines). */
function gatewayLog() {
  const file = join(work, "openclaw.log");
  return gateway.out + (existsSync(file) ? readFileSync(file, "utf8") : "");
}

/**
 * attemptsOf waits until the plugin has logged `count` lines
 * "teamster: attempt <id> <what> ... (session <key>" and returns their ids.
 */
async function attemptsOf(sessionKey, what, count = 1, timeoutMs = 60000) {
  const re = new RegExp(`teamster: attempt (\\w+) ${what}[^"\\n]*\\(session ${sessionKey}[,)]`, "g");
  const until = Date.now() + timeoutMs;
  for (;;) {
    const ids = [...new Set([...gatewayLog().matchAll(re)].map((m) => m[1]))];
    if (ids.length >= count || Date.now() > until) return ids;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** logMatch waits until the gateway's log matches re; false after timeoutMs. */
async function logMatch(re, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (!re.test(gatewayLog())) {
    if (Date.now() > until) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
  return true;
}

/** assistantReply polls the session's history until an assistant row matches re. */
async function assistantReply(sessionKey, re, timeoutMs = 120000) {
  const isReply = (m) => m.role === "assistant" && re.test(m.text);
  const rows = await historyUntil(sessionKey, (rs) => rs.some(isReply), timeoutMs);
  return { rows, text: rows.find(isReply)?.text };
}

// historyUntil reads the session's history until done accepts it, or until
// timeoutMs has passed; it returns the last rows read either way.
async function historyUntil(sessionKey, done, timeoutMs) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const rows = await history(sessionKey);
    if (done(rows) || Date.now() > until) return rows;
    await new Promise((r) => setTimeout(r, 250));
  }
}

let failed = true; // until the set-up completed

before(async () => {
  requireFile(node24, "run integrations/openclaw/scripts/deps.sh (installs Node.js 24 into .tools/node24)");
  requireFile(openclawEntry, "run integrations/openclaw/scripts/deps.sh (installs the pinned openclaw into .tools/openclaw)");
  requireFile(join(pluginDir, "node_modules/@nats-io/transport-node/package.json"), "run npm ci in integrations/openclaw");
  work = tempDir("teamster-oc-e2e-");
  // Under --secure the fleet writes its credentials here when it starts; the
  // plugin's settings name the files before they exist (it reads them when
  // it connects).
  secureDir = e2eSecure ? join(work, "secure") : undefined;
  creds = secureDir ? fleetCredentials(secureDir) : null;
  console.log(`# fleet ${e2eSecure ? `teamster dev --secure ${secureDir}` : "teamster dev (TEAMSTER_E2E_INSECURE=1: no TLS, no NATS permissions)"}`);
  const natsPort = await freePort();
  natsUrl = fleetUrl(natsPort);
  deadNatsUrl = fleetUrl(await freePort()); // nobody listens there
  gatewayPort = await freePort();
  const cfgPath = join(work, "openclaw.json");
  gwEnv = openclawEnv({ HOME: work, OPENCLAW_STATE_DIR: join(work, "state"), OPENCLAW_CONFIG_PATH: cfgPath, OPENCLAW_GATEWAY_TOKEN: TOKEN });
  // Go builds the fleet while the plugin is installed into the three homes.
  // The exec that finds no fleet runs right after its install; the other
  // waits for the fleet.
  let fleetUp;
  const fleetReady = new Promise((r) => (fleetUp = r));
  const building = buildTeamster(work);
  building.catch(() => {});
  execDown = exec("exec-down", deadNatsUrl, "anyone?");
  execDown.catch(() => {});
  execOk = exec("exec", natsUrl, "hello from agent exec", fleetReady);
  execOk.catch(() => {});
  await setUpHome(cfgPath, gwEnv, openclawConfig(natsUrl, gatewayPort, gatewayIdentity(creds, GATEWAY_ID)));
  addSeamsPlugin(cfgPath);
  console.log(`# plugin installed into the gateway's home at ${since()}`);
  // The gateway starts now (the plugin connects at its first turn).
  gateway = oc(["gateway", "run", "--bind", "loopback", "--auth", "token", "--port", String(gatewayPort)], gwEnv);
  gatewayReady = gateway.waitFor(/\[gateway\]\s+ready/, 240000, "openclaw gateway").then((m) => {
    console.log(`# gateway ready at ${since()}`);
    return m;
  });
  gatewayReady.catch(() => {});
  // The first gateway turn (the `openclaw agent` CLI) starts as soon as the
  // gateway is ready, while the exec runs may still be going.
  cliTurn = Promise.all([gatewayReady, fleetReady]).then(() => oc(["agent", "--session-key", "e2e-main", "--message", "hello from openclaw", "--json"], gwEnv).done(240000));
  cliTurn.catch(() => {});
  bin = await building;
  fleet = await startFleet(bin, { port: natsPort, secureDir, gateways: [GATEWAY_ID, EXEC_ID] });
  assert.equal(fleet.natsUrl, natsUrl);
  console.log(`# fleet up at ${since()}`);
  fleetUp();
  rpc = await gatewayClient({ url: `ws://127.0.0.1:${gatewayPort}`, token: TOKEN, stateDir: join(work, "rpc-state") });
  failed = false;
});

afterEach((t) => {
  if (t.passed === false) failed = true;
});

after(async () => {
  await Promise.all([gateway?.stop("SIGTERM", 20000), fleet?.proc.stop("SIGTERM", 30000)]);
  // Keep the folder (logs, state) of a failed run, or on request.
  if (work && !failed && !process.env.TEAMSTER_KEEP_E2E) rmSync(work, { recursive: true, force: true });
  else if (work) console.log(`# kept ${work}`);
});

/**
 * The OpenClaw config this test runs: a provider pinned to the fleet;
 * identity: the plugin's fleet identity settings (gatewayIdentity).
 */
export function openclawConfig(url, port, identity = {}) {
  return {
    gateway: { mode: "local", port, bind: "loopback", auth: { mode: "token", token: TOKEN } },
    plugins: {
      load: { paths: [pluginDir] },
      allow: ["teamster"],
      slots: { memory: "none" },
      entries: {
        teamster: {
          enabled: true,
          config: {
            natsUrl: url,
            ...identity,
            requestTimeoutMs: 5000,
            connectTimeoutMs: 3000,
            settlementTimeoutMs: 5000,
            routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } },
          },
        },
      },
    },
    models: {
      providers: {
        fleet: {
          baseUrl: "http://127.0.0.1:9/v1",
          api: "openai-completions",
          apiKey: "not-used",
          agentRuntime: { id: "teamster" },
          // Image input, so that OpenClaw hands images to the harness inline.
          models: [{ id: "echo", name: "teamster scripted echo", input: ["text", "image"] }],
        },
      },
    },
    // No heartbeat turns on the main session while the tests run.
    agents: { defaults: { model: "fleet/echo", workspace: join(work, "workspace"), heartbeat: { every: "0m" } } },
    logging: { file: join(work, "openclaw.log") },
  };
}

test("agent exec runs one headless turn on the fleet", async () => {
  const r = await execOk;
  assert.equal(r.code, 0, `agent exec failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
  assert.equal(r.json?.status, "ok");
  assert.equal(r.json?.final, "hello from agent exec");
  console.log(`# agent exec took ${r.ms} ms (done at ${since()})`);
});

test("agent exec fails closed naming the NATS URL when no fleet answers", async () => {
  const r = await execDown;
  assert.notEqual(r.code, 0, `exec should fail:\n${r.stdout}`);
  assert.ok((r.stdout + r.stderr).includes(deadNatsUrl), `exec names ${deadNatsUrl}:\n${r.stdout}\n${r.stderr}`);
  assert.doesNotMatch(r.stdout, /"status":\s*"ok"/);
  console.log(`# agent exec (no fleet) took ${r.ms} ms`);
});

test("a gateway turn from the openclaw agent CLI comes from the fleet and the history has both rows", async () => {
  const r = await cliTurn;
  assert.equal(r.code, 0, `turn failed:\n${r.stdout}\n${r.stderr}`);
  assert.equal(replyOf(r.json), "hello from openclaw");
  console.log(`# openclaw agent CLI turn took ${r.ms} ms (done at ${since()})`);
  const h = await history("agent:main:e2e-main");
  assert.deepEqual(h.map((m) => m.role), ["user", "assistant"]);
  assert.equal(h[1].text, "hello from openclaw");
});

test("two turns of one session run in order on the fleet under one session key", async () => {
  const final = await agentTurn("agent:main:e2e-main", "the second turn");
  assert.equal(final.status, "ok", JSON.stringify(final));
  assert.equal(replyOf(final), "the second turn");
  const h = await history("agent:main:e2e-main");
  assert.deepEqual(h.map((m) => m.role), ["user", "assistant", "user", "assistant"]);
  assert.deepEqual(h.map((m) => m.text), ["hello from openclaw", "hello from openclaw", "the second turn", "the second turn"]);
  const ids = await attemptsOf("agent:main:e2e-main", "ended ok", 2);
  assert.equal(ids.length, 2, `two attempts for the session in the gateway log:\n${gatewayLog().slice(-3000)}`);
  const [a, b] = ids.map(fleetResult);
  assert.equal(a.status, "ok");
  assert.equal(b.status, "ok");
  // One session key on the fleet: one fence epoch, and the second turn's
  // fence follows the first's.
  const [ea, na] = a.fence.split(":");
  const [eb, nb] = b.fence.split(":");
  assert.equal(ea, eb);
  assert.ok(Number(nb) > Number(na), `fences ${a.fence} then ${b.fence}`);
});

test("a turn the fleet fails fails the OpenClaw turn with the fleet's message", async () => {
  const final = await agentTurn("agent:main:e2e-fail", JSON.stringify({ script: [{ say: "starting" }, { fail: "the fleet says no" }] }));
  assert.notEqual(final.status, "ok", JSON.stringify(final));
  assert.match(JSON.stringify(final), /the fleet says no/);
  const [id] = await attemptsOf("agent:main:e2e-fail", "ended error harness_failed");
  assert.ok(id, "the gateway log names the failed attempt");
  assert.equal(fleetResult(id).error.code, "harness_failed");
});

test("a turn aborted in OpenClaw (chat.abort) is cancelled on the fleet", async () => {
  const key = "agent:main:e2e-abort";
  const runId = `e2e-abort-${Date.now()}`;
  await rpc("chat.send", { sessionKey: key, message: JSON.stringify({ script: [{ say: "working" }, { sleep: 120000 }] }), idempotencyKey: runId });
  assert.equal((await attemptsOf(key, "claimed", 1, 120000)).length, 1, "the fleet claims the turn");
  const t0 = Date.now();
  await rpc("chat.abort", { sessionKey: key, runId });
  const [id] = await attemptsOf(key, "ended cancelled cancelled");
  assert.ok(id, `the fleet cancels the turn:\n${gatewayLog().slice(-3000)}`);
  const res = fleetResult(id);
  assert.equal(res.status, "cancelled");
  assert.equal(res.error.code, "cancelled");
  assert.ok(Date.now() - t0 < 60000, "cancelled well before the script's sleep ended");
});

test("steering a running turn (chat.send, queueMode steer) reaches the scripted harness through teamster injection", async () => {
  const key = "agent:main:e2e-steer";
  // The turn starts as the Control UI or a channel starts one (chat.send):
  // such a turn has a reply operation, where OpenClaw looks steering up.
  await rpc("chat.send", {
    sessionKey: key,
    message: JSON.stringify({ script: [{ say: "waiting for steering" }, { awaitInjection: 60000 }, { say: "done" }] }),
    idempotencyKey: `e2e-steer-turn-${Date.now()}`,
  });
  assert.equal((await attemptsOf(key, "claimed", 1, 120000)).length, 1, "the fleet claims the turn");
  const t0 = Date.now();
  const ack = await rpc("chat.send", { sessionKey: key, message: STEER, queueMode: "steer", idempotencyKey: `e2e-steer-${Date.now()}` });
  assert.equal(ack?.status, "started", JSON.stringify(ack));
  const { rows: replyRows, text } = await assistantReply(key, /done/, 120000);
  assert.ok(text, `the steered turn ended:\n${JSON.stringify(replyRows)}\n${gatewayLog().slice(-3000)}`);
  assert.ok(Date.now() - t0 < 45000, "the harness took the steer instead of waiting out awaitInjection");
  // One reply, in the harness's order: the steer arrived while it waited.
  assert.match(text, new RegExp(`waiting for steering[\\s\\S]*${STEER}[\\s\\S]*done`));
  // OpenClaw writes the steer's user row after the reply's (about 100 ms
  // later in a CI run), so wait for it rather than read the history once.
  const rows = await historyUntil(key, (rs) => rs.some((m) => m.role === "user" && m.text === STEER), 10000);
  assert.deepEqual(rows.filter((m) => m.role === "user").map((m) => m.text).slice(-1), [STEER], "the steering input is in the transcript");
  assert.equal(rows.filter((m) => m.role === "assistant").length, 1, "no second turn");
  // On the fleet: one attempt for the session, whose result holds the steer.
  const ids = await attemptsOf(key, "ended ok", 1);
  assert.equal(ids.length, 1);
  assert.deepEqual(await attemptsOf(key, "accepted", 2, 0), ids, "the steer did not become its own fleet turn");
  assert.ok(fleetResult(ids[0]).assistantTexts.includes(STEER));
});

test("a source-bound steer (a person's client, expectedProfileId) reaches the running fleet turn under OpenClaw's own assertion", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  // The Control UI's way: a person's client sends the steer with
  // expectedProfileId, so OpenClaw hands it to the harness as source-bound
  // input with an assertion. The plugin sends it to the fleet with a host
  // assertion; the worker asks the gateway for it right before dispatch.
  const key = "agent:main:e2e-steer-bound";
  const op = await operatorClient({ url: `ws://127.0.0.1:${gatewayPort}`, token: TOKEN });
  try {
    await op.request("chat.send", {
      sessionKey: key,
      message: JSON.stringify({ script: [{ say: "waiting for the operator" }, { awaitInjection: 60000 }, { say: "done" }] }),
      idempotencyKey: op.randomKey("e2e-bound-turn"),
    });
    const [id] = await attemptsOf(key, "claimed", 1, 120000);
    assert.ok(id, "the fleet claims the turn");
    const steer = "operator steer: take the coast road";
    const ack = await op.request("chat.send", { sessionKey: key, message: steer, queueMode: "steer", idempotencyKey: op.randomKey("e2e-bound-steer") },
      { expectedProfileId: OWNER_PROFILE });
    assert.equal(ack?.status, "started", JSON.stringify(ack));
    const { rows, text } = await assistantReply(key, /done/, 120000);
    assert.ok(text, `the steered turn ended:\n${JSON.stringify(rows)}\n${gatewayLog().slice(-3000)}`);
    assert.match(text, new RegExp(`waiting for the operator[\\s\\S]*${steer}[\\s\\S]*done`));
    assert.match(gatewayLog(), new RegExp(`teamster: attempt ${id} took steering \\S+ as source-bound input under OpenClaw's assertion oc-`),
      "the plugin sent the steer as source-bound, not as run input");
    assert.ok(fleetResult(id).assistantTexts.includes(steer));
    assert.deepEqual(await attemptsOf(key, "accepted", 2, 0), [id], "the steer did not become its own fleet turn");
  } finally {
    op.stop();
  }
});

test("a source-bound steer whose sender is revoked before the fleet dispatches it is dropped; run input beside it is still committed", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-steer-revoked";
  const op = await operatorClient({ url: `ws://127.0.0.1:${gatewayPort}`, token: TOKEN });
  try {
    // The harness queues input at once and dispatches it only after its
    // sleep: the window in which the sender loses its authority.
    await op.request("chat.send", {
      sessionKey: key,
      message: JSON.stringify({ script: [{ say: "listening" }, { sleep: 8000 }, { awaitInjection: 1000 }, { say: "done" }] }),
      idempotencyKey: op.randomKey("e2e-revoke-turn"),
    });
    const [id] = await attemptsOf(key, "claimed", 1, 120000);
    assert.ok(id, "the fleet claims the turn");
    const bound = "operator steer: open the floodgates";
    const plain = "run steer: keep to the schedule";
    assert.equal((await op.request("chat.send", { sessionKey: key, message: bound, queueMode: "steer", idempotencyKey: op.randomKey("e2e-revoke-bound") },
      { expectedProfileId: OWNER_PROFILE }))?.status, "started");
    assert.equal((await op.request("chat.send", { sessionKey: key, message: plain, queueMode: "steer", idempotencyKey: op.randomKey("e2e-revoke-plain") }))?.status, "started");
    // The fleet admitted the source-bound item (the worker asked the gateway
    // once already); only then is the sender revoked.
    assert.ok(await logMatch(new RegExp(`teamster: attempt ${id} took steering \\S+ as source-bound input`), 30000), "the fleet admitted the source-bound steer");
    // The sender's device is removed: its authority ends.
    await rpc("device.pair.remove", { deviceId: op.deviceId });
    const { rows, text } = await assistantReply(key, /done/, 120000);
    assert.ok(text, `the turn ended:\n${JSON.stringify(rows)}\n${gatewayLog().slice(-3000)}`);
    assert.match(text, new RegExp(plain), "the run input beside it was committed");
    assert.doesNotMatch(text, new RegExp(bound), "the fleet dispatched a steer whose sender was revoked");
    assert.match(gatewayLog(), new RegExp(`teamster: attempt ${id} steering assertion oc-\\S+ no longer holds`));
    const res = fleetResult(id);
    assert.ok(res.assistantTexts.includes(plain) && !res.assistantTexts.includes(bound), JSON.stringify(res.assistantTexts));
    // Dropped, not replayed: OpenClaw runs no later turn with it.
    await new Promise((r) => setTimeout(r, 3000));
    assert.deepEqual(await attemptsOf(key, "accepted", 2, 0), [id], "the revoked steer became a turn of its own");
    assert.ok(!(await history(key)).some((m) => m.role === "assistant" && m.text.includes(bound)));
  } finally {
    op.stop();
  }
});

test("a steer with an image reaches the fleet turn with the image whole", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-steer-image";
  // A 1x1 PNG.
  const png = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", "base64");
  await rpc("chat.send", {
    sessionKey: key,
    message: JSON.stringify({ script: [{ say: "show me" }, { awaitInjection: 60000 }, { say: "done" }] }),
    idempotencyKey: `e2e-image-turn-${Date.now()}`,
  });
  const [id] = await attemptsOf(key, "claimed", 1, 120000);
  assert.ok(id, "the fleet claims the turn");
  const steer = "this is the dot I meant";
  const ack = await rpc("chat.send", {
    sessionKey: key, message: steer, queueMode: "steer", idempotencyKey: `e2e-image-steer-${Date.now()}`,
    attachments: [{ type: "image", mimeType: "image/png", fileName: "dot.png", content: png.toString("base64") }],
  });
  assert.equal(ack?.status, "started", JSON.stringify(ack));
  const { rows, text } = await assistantReply(key, /done/, 120000);
  assert.ok(text, `the turn ended:\n${JSON.stringify(rows)}\n${gatewayLog().slice(-3000)}`);
  // The scripted harness shows each injected image as its type, size and hash.
  const hash = createHash("sha256").update(png).digest("hex").slice(0, 12);
  const res = fleetResult(id);
  assert.deepEqual(res.assistantTexts.slice(1, 3), [steer, `[image image/png, ${png.length} bytes, sha256 ${hash}]`], JSON.stringify(res.assistantTexts));
  assert.deepEqual(await attemptsOf(key, "accepted", 2, 0), [id], "the steer did not become its own fleet turn");
});

test("resetting a session in OpenClaw (sessions.reset) resets the fleet's record of it", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-reset";
  const final = await agentTurn(key, "before the reset");
  assert.equal(final.status, "ok", JSON.stringify(final));
  await rpc("sessions.reset", { key });
  // OpenClaw calls the harness's reset; the fleet had a record (the turn
  // above wrote it) and cleared its binding, state and lock.
  assert.ok(await logMatch(new RegExp(`teamster: session ${key} reset on the fleet \\(reset\\)(?!:)`), 30000),
    `the plugin reset the fleet session:\n${gatewayLog().slice(-3000)}`);
  // A session the fleet never ran is answered too, without a record.
  await rpc("sessions.reset", { key: "agent:main:e2e-never-ran" }).catch(() => {});
  const after = await agentTurn(key, "after the reset");
  assert.equal(after.status, "ok", JSON.stringify(after));
  assert.equal(replyOf(after), "after the reset");
});

test("OpenClaw's seams act on fleet turns: a registered tool-result middleware transforms a fleet tool result before the harness gets it, and agent_end fires once per turn", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-seams";
  const final = await agentTurn(key, JSON.stringify({ script: [{ tool: { name: "seams_echo", args: { text: "ping" } } }, { say: "done" }] }));
  assert.equal(final.status, "ok", JSON.stringify(final));
  const [id] = await attemptsOf(key, "ended ok");
  assert.ok(id, "the turn ran on the fleet");
  // The scripted harness appends the tool result it received: the
  // middleware's, not the tool's own.
  const texts = fleetResult(id).assistantTexts;
  assert.ok(texts.some((t) => t.includes("[mw] echo ping")), `the harness got the middleware's result:\n${JSON.stringify(texts)}\n${gatewayLog().slice(-3000)}`);
  assert.ok(!texts.some((t) => /"echo ping"/.test(t)), "the harness got the raw tool result");
  // agent_end: once for the turn (side effects run after the turn returns).
  assert.ok(await logMatch(new RegExp(`seams: agent_end session=${key} success=true`), 30000), `agent_end fired:\n${gatewayLog().slice(-3000)}`);
  await new Promise((r) => setTimeout(r, 2000));
  // Counted in the log file, one JSON line per entry (stdout repeats it).
  const lines = readFileSync(join(work, "openclaw.log"), "utf8").split("\n").filter((l) => l.includes(`"message":"seams: agent_end session=${key} `));
  assert.equal(lines.length, 1, `agent_end fired once:\n${lines.join("\n")}`);
});

test("a fleet harness's question (userInput) is asked in the channel and the user's reply answers it", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  // A person's session (OpenClaw keeps questions to sessions with a user
  // profile): the turn and the answer come from their client.
  const key = "agent:main:e2e-ask";
  const op = await operatorClient({ url: `ws://127.0.0.1:${gatewayPort}`, token: TOKEN });
  try {
    await op.request("chat.send", {
      sessionKey: key,
      message: JSON.stringify({ script: [{ say: "one question first" }, { ask: { question: "Which way, left or right?", choices: ["left", "right"] } }, { say: "done" }] }),
      idempotencyKey: op.randomKey("e2e-ask-turn"),
    });
    const [id] = await attemptsOf(key, "claimed", 1, 120000);
    assert.ok(id, "the fleet claims the turn");
    assert.ok(await logMatch(new RegExp(`teamster: attempt ${id} asks the user a question`), 60000), `the plugin asked:\n${gatewayLog().slice(-3000)}`);
    // The question is OpenClaw's own, pending on the session.
    let pending;
    for (let until = Date.now() + 30000; !pending && Date.now() < until; await new Promise((r) => setTimeout(r, 250))) {
      const list = await op.request("question.list", {});
      pending = (list?.questions ?? []).find((q) => q.sessionKey === key && q.status === "pending");
    }
    assert.ok(pending, `OpenClaw lists the fleet harness's question as pending:\n${gatewayLog().slice(-3000)}`);
    // The user replies in the channel.
    await op.request("chat.send", { sessionKey: key, message: "left", idempotencyKey: op.randomKey("e2e-ask-answer") });
    const { rows, text } = await assistantReply(key, /done/, 120000);
    assert.ok(text, `the turn ended:\n${JSON.stringify(rows)}\n${gatewayLog().slice(-3000)}`);
    const res = fleetResult(id);
    assert.deepEqual(res.assistantTexts, ["one question first", "left", "done"], JSON.stringify(res.assistantTexts));
    assert.deepEqual(await attemptsOf(key, "accepted", 2, 0), [id], "the answer did not become its own fleet turn");
  } finally {
    op.stop();
  }
});

test("a reply's attachment is read from the worker's workspace; a missing one and one that leads outside it get OpenClaw's failure notices", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-media";
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
  const final = await agentTurn(key, JSON.stringify({ script: [
    { write: { path: "out/dot.png", base64: png } },
    // A symlink inside the workspace to a file outside it: the worker refuses it.
    { write: { path: "out/leak.png", symlink: "/etc/hostname" } },
    { say: "Here is the dot.\n\nMEDIA:out/dot.png\nMEDIA:out/leak.png\nMEDIA:out/missing.png" },
  ] }));
  assert.equal(final.status, "ok", JSON.stringify(final));
  const payloads = final?.result?.payloads ?? [];
  const media = payloads.flatMap((p) => p.mediaUrls ?? (p.mediaUrl ? [p.mediaUrl] : []));
  const text = payloads.map((p) => p.text ?? "").join("\n");
  assert.equal(media.length, 1, `one attachment staged:\n${JSON.stringify(payloads)}\n${gatewayLog().slice(-3000)}`);
  // OpenClaw staged the bytes it read from the worker (state/media/outbound/dot---<uuid>.png).
  assert.match(media[0], /dot-+[\w-]*\.png$/);
  assert.deepEqual(readFileSync(media[0]), Buffer.from(png, "base64"), "the staged file holds the worker's bytes");
  assert.match(text, /⚠️ leak\.png: Delivery failed/, "the symlink out of the workspace is refused");
  assert.match(text, /⚠️ missing\.png: File not found/, "the missing file gets OpenClaw's not-found notice");
  // The file exists only on the worker: the gateway's own workspace has none.
  assert.equal(existsSync(join(work, "workspace", "out", "dot.png")), false);
  const [id] = await attemptsOf(key, "ended ok");
  assert.ok(await logMatch(new RegExp(`teamster: attempt ${id} staged \\d+ reply attachment\\(s\\) from the worker's workspace \\(1 read\\)`), 10000));
});

test("a tool-only fleet turn is finalized by OpenClaw through the plugin: one tool-less fleet operation on the same thread answers it", async () => {
  await gatewayReady; // also when run alone (--test-name-pattern)
  const key = "agent:main:e2e-finalize";
  // The tool's result stays out of the reply: a turn of tool calls only.
  const final = await agentTurn(key, JSON.stringify({ script: [{ tool: { name: "seams_echo", args: { text: "quiet" }, quiet: true } }] }));
  assert.equal(final.status, "ok", JSON.stringify(final));
  const reply = replyOf(final);
  assert.match(reply, /^finalized \(thread scripted-[\w-]+, turn 2\): The previous assistant turn completed its tool calls/,
    `OpenClaw's answer is the fleet finalization's:\n${JSON.stringify(final)}\n${gatewayLog().slice(-3000)}`);
  // Two fleet attempts for the session: the turn, then the finalization, the
  // second on the same native thread (turn 2 of it).
  const ids = await attemptsOf(key, "ended ok", 2);
  assert.equal(ids.length, 2, gatewayLog().slice(-3000));
  const [turn, fin] = ids.map(fleetResult);
  assert.deepEqual(turn.assistantTexts, []);
  assert.deepEqual(fin.assistantTexts, [reply]);
  assert.equal(turn.fence.split(":")[0], fin.fence.split(":")[0]);
  assert.ok(Number(fin.fence.split(":")[1]) > Number(turn.fence.split(":")[1]), "the finalization ran after the turn, under the session's lease");
});

test("a turn started by the gateway's agent method cannot be steered: the message becomes the next turn", async () => {
  // OpenClaw 2026.9.6 steers through the session's reply operation, which
  // the `agent` method (`openclaw agent`) never creates (README, "Steering").
  // Should OpenClaw change that, this test fails and the README must change.
  const key = "agent:main:e2e-agent-steer";
  const turn = agentTurn(key, JSON.stringify({ script: [{ say: "waiting" }, { awaitInjection: 4000 }, { say: "done" }] }));
  assert.equal((await attemptsOf(key, "claimed", 1, 120000)).length, 1, "the fleet claims the turn");
  await rpc("chat.send", { sessionKey: key, message: STEER, queueMode: "steer", idempotencyKey: `e2e-agent-steer-${Date.now()}` });
  const final = await turn;
  assert.equal(final.status, "ok", JSON.stringify(final));
  assert.equal(replyOf(final), "waiting\n\ndone", "the running turn never saw the message");
  const { text } = await assistantReply(key, new RegExp(`^${STEER}$`), 60000);
  assert.equal(text, STEER, "the message ran as its own turn afterwards");
  assert.equal((await attemptsOf(key, "ended ok", 2)).length, 2);
});

test("the fleet's NATS refused the gateway nothing, and it connected as configured", async () => {
  const log = gatewayLog();
  assert.doesNotMatch(log, /Permissions Violation/i, "the plugin logs every NATS error the server reports");
  assert.ok(log.includes(`teamster: connected to the fleet at ${natsUrl}`), `the gateway connected to ${natsUrl}:\n${log.slice(-3000)}`);
});

test("with the fleet down a gateway turn fails closed naming the NATS URL", async () => {
  await fleet.proc.stop("SIGTERM", 30000);
  const final = await agentTurn("agent:main:e2e-down", "is anybody there");
  assert.notEqual(final.status, "ok", JSON.stringify(final));
  assert.ok(JSON.stringify(final).includes(natsUrl), `the error names ${natsUrl}:\n${JSON.stringify(final)}`);
});
