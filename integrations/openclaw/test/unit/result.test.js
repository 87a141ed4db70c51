import assert from "node:assert/strict";
import { test } from "node:test";
import { failureResult, mapResult } from "../../src/result.js";
import { ERROR_CODES, TeamsterError, resultStatusFor, validateResult, newAttemptId, validId, encode } from "../../src/wire.js";
import { params } from "../support/params.js";

const ctx = { harnessId: "teamster", api: "openai-completions", toolMetas: [], externalAbort: false, now: 1 };

test("an ok result maps to an ok OpenClaw result with the fleet's text", () => {
  const r = validateResult({
    v: 1, attemptId: "A1", status: "ok", harnessId: "codex", workerId: "w1", fence: "e:1",
    assistantTexts: ["hello", "world"], usage: { outputTokens: 12 }, runtimeArtifact: { id: "codex", fingerprint: "scripted/1" },
  });
  const out = mapResult(params(), r, ctx);
  assert.deepEqual(out.terminal, { kind: "ok" });
  assert.deepEqual(out.assistantTexts, ["hello", "world"]);
  assert.deepEqual(out.lastAssistant.content, [{ type: "text", text: "hello\n\nworld" }]);
  assert.equal(out.lastAssistant.usage.output, 12);
  assert.equal(out.sessionIdUsed, "sess-1");
  assert.equal(out.agentHarnessId, "teamster");
  assert.deepEqual(out.runtimeArtifact, { id: "codex", fingerprint: "scripted/1" });
  assert.equal(out.hasSuccessfulModelResponse, true);
  for (const k of ["messagesSnapshot", "toolMetas", "messagingToolSentTexts", "messagingToolSentMediaUrls", "messagingToolSentTargets"]) assert.ok(Array.isArray(out[k]), k);
  assert.equal(out.didSendViaMessagingTool, false);
  assert.equal(out.cloudCodeAssistFormatError, false);
});

test("an ok turn without visible text keeps the fleet's classification", () => {
  for (const c of ["empty", "reasoning-only", "planning-only"]) {
    const out = mapResult(params(), validateResult({ v: 1, attemptId: "A", status: "ok", assistantTexts: [], classification: c, usage: { outputTokens: 0 } }), ctx);
    assert.equal(out.agentHarnessResultClassification, c);
  }
});

const expectedKind = {
  deadline_exceeded: "timeout",
  queue_timeout: "timeout",
  cancelled: "aborted",
  drain_timeout: "failed",
};

test("every teamster error code maps to OpenClaw's terminal with the fleet's message", () => {
  assert.equal(ERROR_CODES.length, 19);
  for (const code of ERROR_CODES) {
    for (const sideEffects of ["none", "possible"]) {
      const r = validateResult({
        v: 1, attemptId: "A1", status: resultStatusFor(code), assistantTexts: ["partial"], usage: { outputTokens: 3 },
        error: { code, message: `fleet message for ${code}`, sideEffects },
      });
      const out = mapResult(params(), r, ctx);
      const kind = expectedKind[code] ?? "failed";
      assert.equal(out.terminal.kind, kind, code);
      const err = kind === "failed" ? out.terminal.error : out.terminal.failure.error;
      assert.ok(err instanceof TeamsterError, code);
      assert.equal(err.code, code);
      assert.equal(err.message, `teamster ${code}: fleet message for ${code} (attempt A1, side effects: ${sideEffects})`);
      assert.equal(out.lastAssistant.errorMessage, err.message);
      assert.equal(out.replayMetadata.replaySafe, sideEffects === "none", `${code} ${sideEffects}`);
      assert.equal(out.replayMetadata.hadPotentialSideEffects, sideEffects === "possible");
      if (kind === "timeout") assert.equal(out.terminal.source, code === "queue_timeout" ? "run_budget" : "runtime");
      if (kind === "aborted") assert.equal(out.terminal.source, "runtime");
    }
  }
});

test("a cancel OpenClaw asked for is an external abort", () => {
  const r = validateResult({ v: 1, attemptId: "A1", status: "cancelled", assistantTexts: [], usage: { outputTokens: 0 }, error: { code: "cancelled", message: "openclaw: user_abort", sideEffects: "possible" } });
  const out = mapResult(params(), r, { ...ctx, externalAbort: true });
  assert.deepEqual([out.terminal.kind, out.terminal.source], ["aborted", "external"]);
});

test("results whose status does not follow their code are refused", () => {
  assert.throws(() => validateResult({ v: 1, attemptId: "A", status: "error", error: { code: "cancelled", message: "x" } }), /has status cancelled/);
  assert.throws(() => validateResult({ v: 1, attemptId: "A", status: "ok", error: { code: "internal" } }), /ok result/);
  assert.throws(() => validateResult({ v: 1, attemptId: "A", status: "error", error: { code: "nope" } }), /known code/);
  assert.throws(() => validateResult({ v: 1, attemptId: "A", status: "weird" }), /status/);
});

test("failures before a result (fleet down, rejected submit) fail closed", () => {
  const err = new TeamsterError("internal", "teamster: cannot reach the fleet at nats://127.0.0.1:4222: ECONNREFUSED", "none");
  const out = failureResult(params(), err, ctx);
  assert.equal(out.terminal.kind, "failed");
  assert.match(out.terminal.error.message, /nats:\/\/127\.0\.0\.1:4222/);
  assert.equal(out.replayMetadata.replaySafe, true);
  const rej = failureResult(params(), new TeamsterError("harness_not_registered", "teamster: rejected", "none"), ctx);
  assert.equal(rej.terminal.error.code, "harness_not_registered");
});

test("attempt ids are valid subject tokens and bodies over 1 MiB are refused", () => {
  for (let i = 0; i < 100; i++) assert.ok(validId(newAttemptId()));
  assert.equal(newAttemptId(0, () => new Uint8Array(16)), "0".repeat(26));
  assert.throws(() => encode({ v: 1, text: "x".repeat(1 << 20) }), (e) => e.code === "payload_too_large");
});
