import assert from "node:assert/strict";
import { test } from "node:test";
import { buildAttempt, describeTools, routeFacts } from "../../src/attempt.js";
import { resolveConfig } from "../../src/config.js";
import { decideSupport } from "../../src/support.js";
import { Registry } from "../../src/registry.js";
import { params } from "../support/params.js";

const cfg = resolveConfig({ hostId: "h1", routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } });

test("an attempt carries the session identity, route facts, prompt and timeouts", () => {
  const a = buildAttempt(
    params({ sessionTarget: { storePath: "/state/sessions.json" }, authProfileId: "openai:work", images: [{ type: "image", data: "x" }], startedAtMs: 1 }),
    cfg,
    { attemptId: "01ABC", replyTo: "_INBOX.x", hostId: "h1", tools: [{ name: "read" }] },
  );
  assert.deepEqual(a, {
    v: 1,
    attemptId: "01ABC",
    runId: "run-1",
    agentId: "main",
    sessionKey: "agent:main:unit",
    sessionId: "sess-1",
    storePath: "/state/sessions.json",
    provider: "openai",
    modelId: "echo",
    modelProvider: { requestTransportOverrides: "none", runtimePolicy: { compatibleIds: ["codex"] } },
    prompt: "hello",
    timeoutMs: 60000,
    queueTimeoutMs: 600000,
    settlementTimeoutMs: 30000,
    modelSelectionLocked: false,
    replyTo: "_INBOX.x",
    hostId: "h1",
    images: [{ type: "image", data: "x" }],
    tools: [{ name: "read" }],
    authProfileRef: "openai:work",
  });
});

test("OpenClaw's pins on this plugin's harness become the route's fleet runtime", () => {
  const pinned = resolveConfig({ routes: { fleet: { provider: "openai", compatibleIds: ["codex"], runtime: "codex" } } });
  const a = buildAttempt(params({ modelSelectionLocked: true }), pinned, { attemptId: "A1" });
  assert.equal(a.agentHarnessId, "codex");
  assert.equal(a.agentHarnessRuntimeOverride, "codex");
  assert.equal(a.modelSelectionLocked, true);
  // Without a configured runtime the fleet selects (auto): no pin travels.
  const b = buildAttempt(params(), cfg, { attemptId: "A2" });
  assert.equal(b.agentHarnessId, undefined);
  assert.equal(b.agentHarnessRuntimeOverride, undefined);
  // A pin on another runtime id travels as is; openclaw and default never do.
  const c = buildAttempt(params({ agentHarnessId: "claude-cli", agentHarnessRuntimeOverride: "default" }), cfg, { attemptId: "A3" });
  assert.equal(c.agentHarnessId, "claude-cli");
  assert.equal(c.agentHarnessRuntimeOverride, undefined);
  const d = buildAttempt(params({ agentHarnessId: "openclaw", agentHarnessRuntimeOverride: "openclaw" }), cfg, { attemptId: "A4" });
  assert.equal(d.agentHarnessId, undefined);
});

test("route facts come from config first, then OpenClaw's prepared route", () => {
  const none = resolveConfig({});
  const planned = { runtimePolicy: { compatibleIds: ["codex"] }, requestTransportOverrides: "present" };
  const a = buildAttempt(params({ provider: "openai", runtimePlan: { auth: { modelRoute: planned } } }), none, { attemptId: "A" });
  assert.equal(a.provider, "openai");
  assert.deepEqual(a.modelProvider, { requestTransportOverrides: "present", runtimePolicy: { compatibleIds: ["codex"] } });
  const deferred = { runtimePolicy: { compatibleIds: ["claude-cli"] }, requestTransportOverrides: "none" };
  const b = buildAttempt(params({ provider: "anthropic", runtimePlan: { auth: { deferredRouteSupport: deferred } } }), none, { attemptId: "B" });
  assert.deepEqual(b.modelProvider.runtimePolicy, { compatibleIds: ["claude-cli"] });
  const byModel = resolveConfig({ routes: { fleet: { provider: "openai" }, "fleet/echo": { provider: "anthropic", modelId: "claude", compatibleIds: ["claude-cli"] } } });
  const f = routeFacts(byModel, "fleet", "echo", undefined);
  assert.equal(f.provider, "anthropic");
  assert.equal(f.modelId, "claude");
});

test("timeouts are clamped to the contract's bounds and tools follow OpenClaw's policy", () => {
  const capped = resolveConfig({ timeoutMs: 5000, queueTimeoutMs: 1000, settlementTimeoutMs: 0 });
  const a = buildAttempt(params({ timeoutMs: 10 ** 12, disableTools: true, captureRuntimeArtifact: true, expectedRuntimeArtifact: { id: "codex", fingerprint: "f" } }), capped, { attemptId: "A" });
  assert.equal(a.timeoutMs, 5000);
  assert.equal(a.queueTimeoutMs, 1000);
  assert.equal(a.settlementTimeoutMs, 0);
  assert.deepEqual(a.toolsAllow, []);
  assert.equal(a.captureRuntimeArtifact, true);
  assert.deepEqual(a.expectedRuntimeArtifact, { id: "codex", fingerprint: "f" });
  const b = buildAttempt(params({ timeoutMs: 10 ** 12, toolsAllow: ["read", ""] }), resolveConfig({}), { attemptId: "B" });
  assert.equal(b.timeoutMs, 86_400_000);
  assert.deepEqual(b.toolsAllow, ["read"]);
  assert.deepEqual(describeTools([{ name: "read", description: "Read a file", parameters: { type: "object" }, execute() {} }, { nope: 1 }]), [
    { name: "read", description: "Read a file", inputSchema: { type: "object" } },
  ]);
});

test("config is validated with the bad key named", () => {
  assert.throws(() => resolveConfig({ natsUrl: 3 }), /natsUrl/);
  assert.throws(() => resolveConfig({ queueTimeoutMs: 0 }), /queueTimeoutMs/);
  assert.throws(() => resolveConfig({ routes: { x: { runtime: "a.b" } } }), /routes\["x"\]\.runtime/);
  assert.throws(() => resolveConfig({ user: "u" }), /user and password/);
  assert.equal(resolveConfig({}, { TEAMSTER_NATS_URL: "nats://env:1" }).natsUrl, "nats://env:1");
});

test("supports() answers from route facts and the cached registry", () => {
  const ctx = { provider: "fleet", modelId: "echo", modelProvider: {}, requestedRuntime: "teamster" };
  assert.equal(decideSupport(cfg, ctx, null).supported, true, "unknown registry: the fleet decides at submit");
  assert.equal(decideSupport(resolveConfig({}), ctx, null).supported, false, "no route facts at all");
  let now = 0;
  const reg = new Registry({ now: () => now });
  reg.markKnown();
  assert.equal(decideSupport(cfg, ctx, reg).supported, false, "no live worker");
  const codex = { id: "codex", autoSelection: { providerIds: ["openai"] } };
  reg.set([codex]);
  assert.equal(decideSupport(cfg, ctx, reg).supported, true);
  const overrides = { ...ctx, modelProvider: { requestTransportOverrides: "present" } };
  assert.equal(decideSupport(cfg, overrides, reg).supported, false, "codex does not reproduce overrides");
  const pinnedOther = resolveConfig({ routes: { fleet: { provider: "openai", compatibleIds: ["codex"], runtime: "claude-cli" } } });
  assert.match(decideSupport(pinnedOther, ctx, reg).reason, /harness_not_registered/);
  now = 10_000;
  assert.equal(decideSupport(cfg, ctx, reg).supported, false, "a harness list not refreshed within the registry TTL is gone");
  reg.set([{ noId: true }, null, codex]);
  assert.equal(decideSupport(cfg, ctx, reg).supported, true, "a poll refreshes it; entries without an id are dropped");
  assert.deepEqual(reg.liveManifests(), [codex]);
  reg.reset();
  assert.equal(reg.known, false);
  assert.deepEqual(reg.liveManifests(), []);
});
