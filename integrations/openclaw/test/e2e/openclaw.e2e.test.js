// End to end with the real OpenClaw (pinned in .tools/, Node.js 24) and a
// local teamster fleet (`teamster dev`, built from this repository): a
// loopback gateway with this plugin runs turns whose text comes from the
// scripted harness on the fleet's workers.
//
// Prerequisites (scripts/deps.sh installs the first two; the test fails, never
// skips, when one is missing): .tools/node24, .tools/openclaw, Go, redis-server.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import {
  Proc, buildTeamster, freePort, node24, openclawEntry, pluginDir, requireFile, startFleet, tempDir,
} from "../support/env.js";

const TOKEN = "teamster-e2e-token";
let work, fleet, gateway, gatewayPort, cfgPath, env, bin;

function ocArgs(args) {
  return [openclawEntry, ...args];
}

/** oc runs one OpenClaw CLI command against the test gateway. */
function oc(args, timeoutMs = 240000) {
  const t0 = Date.now();
  const r = spawnSync(node24, ocArgs(args), { env, cwd: work, encoding: "utf8", timeout: timeoutMs });
  const ms = Date.now() - t0;
  let json;
  try {
    json = JSON.parse(r.stdout);
  } catch {}
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, json, ms };
}

function agentTurn(sessionKey, message) {
  return oc(["agent", "--session-key", sessionKey, "--message", message, "--json"]);
}

function replyOf(r) {
  const payloads = r.json?.result?.payloads ?? r.json?.payloads ?? [];
  return payloads.map((p) => p.text ?? "").join("\n");
}

function history(sessionKey) {
  const r = oc(["gateway", "call", "chat.history", "--params", JSON.stringify({ sessionKey }), "--json"], 60000);
  assert.equal(r.code, 0, `chat.history failed: ${r.stderr}`);
  return (r.json?.messages ?? []).map((m) => ({ role: m.role, text: textOf(m.content) }));
}

function textOf(content) {
  if (typeof content === "string") return content;
  return (content ?? []).map((c) => (typeof c === "string" ? c : c?.text ?? "")).join("");
}

/** fleetResult reads an attempt's durable result with the teamster CLI. */
function fleetResult(attemptId) {
  const r = spawnSync(bin, ["result", attemptId, "--wait", "30s", "--json"], { env: { ...process.env, TEAMSTER_NATS_URL: fleet.natsUrl }, encoding: "utf8" });
  assert.equal(r.error, undefined);
  return JSON.parse(r.stdout);
}

/** The gateway's log: its stdout and its log file (plugin info lines). */
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
    await new Promise((r) => setTimeout(r, 200));
  }
}

before(async () => {
  requireFile(node24, "run integrations/openclaw/scripts/deps.sh (installs Node.js 24 into .tools/node24)");
  requireFile(openclawEntry, "run integrations/openclaw/scripts/deps.sh (installs the pinned openclaw into .tools/openclaw)");
  requireFile(join(pluginDir, "node_modules/@nats-io/transport-node/package.json"), "run npm ci in integrations/openclaw");
  work = tempDir("teamster-oc-e2e-");
  bin = buildTeamster(work);
  fleet = await startFleet(bin);
  gatewayPort = await freePort();
  cfgPath = join(work, "openclaw.json");
  writeFileSync(cfgPath, JSON.stringify(openclawConfig(fleet.natsUrl, gatewayPort), null, 2));
  env = {
    ...process.env,
    HOME: work,
    OPENCLAW_STATE_DIR: join(work, "state"),
    OPENCLAW_CONFIG_PATH: cfgPath,
    OPENCLAW_GATEWAY_TOKEN: TOKEN,
    OPENCLAW_NO_AUTO_UPDATE: "1",
    OPENCLAW_DISABLE_BONJOUR: "1",
    NO_COLOR: "1",
  };
  gateway = new Proc(node24, ocArgs(["gateway", "run", "--bind", "loopback", "--auth", "token", "--port", String(gatewayPort)]), { env, cwd: work });
  await gateway.waitFor(/\[gateway\]\s+ready/, 180000, "openclaw gateway");
});

after(async () => {
  await gateway?.stop("SIGTERM", 20000);
  await fleet?.proc.stop("SIGTERM", 30000);
});

/** The OpenClaw config this test runs: a provider pinned to the fleet. */
export function openclawConfig(natsUrl, port) {
  return {
    gateway: { mode: "local", port, bind: "loopback", auth: { mode: "token", token: TOKEN } },
    plugins: {
      load: { paths: [pluginDir] },
      allow: ["teamster"],
      entries: {
        teamster: {
          enabled: true,
          config: {
            natsUrl,
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
          models: [{ id: "echo", name: "teamster scripted echo" }],
        },
      },
    },
    agents: { defaults: { model: "fleet/echo", workspace: join(work, "workspace") } },
    logging: { file: join(work, "openclaw.log") },
  };
}

test("agent exec runs one headless turn on the fleet", () => {
  const cfg = join(work, "exec.json");
  const c = openclawConfig(fleet.natsUrl, gatewayPort);
  delete c.gateway;
  writeFileSync(cfg, JSON.stringify(c));
  const r = spawnSync(node24, ocArgs(["agent", "exec", "hello from agent exec", "--config", cfg, "--json", "--timeout", "120"]), {
    env: { ...env, OPENCLAW_CONFIG_PATH: cfg }, cwd: work, encoding: "utf8", timeout: 240000,
  });
  assert.equal(r.status, 0, `agent exec failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  const out = JSON.parse(r.stdout);
  assert.equal(out.status, "ok");
  assert.equal(out.final, "hello from agent exec");
});

test("a gateway turn's text comes from the fleet and the history has both rows", () => {
  const r = agentTurn("e2e-main", "hello from openclaw");
  assert.equal(r.code, 0, `turn failed:\n${r.stdout}\n${r.stderr}`);
  assert.equal(replyOf(r), "hello from openclaw");
  const h = history("agent:main:e2e-main");
  assert.deepEqual(h.map((m) => m.role), ["user", "assistant"]);
  assert.equal(h[1].text, "hello from openclaw");
});

test("two turns of one session run in order on the fleet under one session key", async () => {
  const r = agentTurn("e2e-main", "the second turn");
  assert.equal(r.code, 0, `turn failed:\n${r.stdout}\n${r.stderr}`);
  assert.equal(replyOf(r), "the second turn");
  const h = history("agent:main:e2e-main");
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
  const r = agentTurn("e2e-fail", JSON.stringify({ script: [{ say: "starting" }, { fail: "the fleet says no" }] }));
  assert.notEqual(r.code, 0, `the turn should fail:\n${r.stdout}`);
  assert.match(r.stdout + r.stderr, /the fleet says no/);
  const [id] = await attemptsOf("agent:main:e2e-fail", "ended error harness_failed");
  assert.ok(id, "the gateway log names the failed attempt");
  assert.equal(fleetResult(id).error.code, "harness_failed");
});

test("a turn aborted in OpenClaw is cancelled on the fleet", async () => {
  const key = "e2e-abort";
  const turn = new Proc(node24, ocArgs(["agent", "--session-key", key, "--message", JSON.stringify({ script: [{ say: "working" }, { sleep: 120000 }] }), "--json"]), { env, cwd: work });
  assert.equal((await attemptsOf(`agent:main:${key}`, "claimed", 1, 120000)).length, 1, "the fleet claims the turn");
  const t0 = Date.now();
  await turn.stop("SIGINT", 60000);
  const [id] = await attemptsOf(`agent:main:${key}`, "ended cancelled cancelled");
  assert.ok(id, `the fleet cancels the turn:\n${gatewayLog().slice(-3000)}`);
  const res = fleetResult(id);
  assert.equal(res.status, "cancelled");
  assert.equal(res.error.code, "cancelled");
  assert.ok(Date.now() - t0 < 60000, "cancelled well before the script's sleep ended");
});

test("steering a running turn reaches the scripted harness through teamster injection", async () => {
  const key = "e2e-steer";
  const turn = new Proc(node24, ocArgs(["agent", "--session-key", key, "--message", JSON.stringify({ script: [{ say: "waiting for steering" }, { awaitInjection: 120000 }, { say: "done" }] }), "--json"]), { env, cwd: work });
  assert.equal((await attemptsOf(`agent:main:${key}`, "claimed", 1, 120000)).length, 1, "the fleet claims the turn");
  // A message sent into the running turn in steer mode (chat.send), as a
  // channel or the Control UI sends one.
  const steer = oc(["gateway", "call", "chat.send", "--params", JSON.stringify({
    sessionKey: `agent:main:${key}`, message: "steer: turn left at the lighthouse", queueMode: "steer", idempotencyKey: `steer-${Date.now()}`,
  }), "--json"], 60000);
  const done = await turn.exited;
  assert.equal(done.code, 0, `the steered turn failed:\n${turn.out}\nsteer call:\n${steer.stdout}\n${steer.stderr}`);
  const out = JSON.parse(turn.out.slice(turn.out.indexOf("{")));
  const text = (out.result?.payloads ?? []).map((p) => p.text).join("\n");
  assert.match(text, /waiting for steering/);
  assert.match(text, /turn left at the lighthouse/);
  assert.match(text, /done/);
});

test("with the fleet down a turn fails closed naming the NATS URL", async () => {
  await fleet.proc.stop("SIGTERM", 30000);
  const r = agentTurn("e2e-down", "is anybody there");
  assert.notEqual(r.code, 0, `the turn should fail:\n${r.stdout}`);
  assert.ok((r.stdout + r.stderr).includes(fleet.natsUrl), `the error names ${fleet.natsUrl}:\n${r.stdout}\n${r.stderr}`);
  assert.doesNotMatch(r.stdout, /"status":\s*"ok"/);
  // And a fresh process (agent exec) fails closed the same way.
  const cfg = join(work, "exec-down.json");
  const c = openclawConfig(fleet.natsUrl, gatewayPort);
  delete c.gateway;
  writeFileSync(cfg, JSON.stringify(c));
  const e = spawnSync(node24, ocArgs(["agent", "exec", "anyone?", "--config", cfg, "--json", "--timeout", "60"]), { env: { ...env, OPENCLAW_CONFIG_PATH: cfg }, cwd: work, encoding: "utf8", timeout: 180000 });
  assert.notEqual(e.status, 0);
  assert.ok((e.stdout + e.stderr).includes(fleet.natsUrl), `exec names ${fleet.natsUrl}:\n${e.stdout}\n${e.stderr}`);
});
