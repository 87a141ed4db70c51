// Mapping teamster's terminal result (and failures before one exists) onto
// OpenClaw's canonical attempt result. Pure.

import { TeamsterError, resultStatusFor } from "./wire.js";

/** The assistant message OpenClaw's transcript and delivery read. */
export function assistantMessage(text, { provider, modelId, api, outputTokens = 0, stopReason = "stop", errorMessage, now = Date.now() }) {
  const m = {
    role: "assistant",
    content: text ? [{ type: "text", text }] : [],
    api: api || "openai-completions",
    provider,
    model: modelId,
    usage: {
      input: 0, output: outputTokens, cacheRead: 0, cacheWrite: 0, totalTokens: outputTokens,
      cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
    },
    stopReason,
    timestamp: now,
  };
  if (errorMessage) m.errorMessage = errorMessage;
  return m;
}

/** The visible reply of a result: its assistant texts, one paragraph each. */
export function replyText(texts) {
  return (texts ?? []).filter((t) => typeof t === "string" && t.length > 0).join("\n\n");
}

/** A readable error for a failed attempt; the fleet's message is kept verbatim. */
export function describeError(err, attemptId) {
  const where = attemptId ? ` (attempt ${attemptId}` + (err.sideEffects ? `, side effects: ${err.sideEffects})` : ")") : "";
  return `teamster ${err.code}: ${err.message}${where}`;
}

/**
 * terminalFor maps a teamster error to OpenClaw's attempt terminal.
 * status follows the code (docs/PROTOCOL.md): timeout for deadline_exceeded and
 * queue_timeout, cancelled for cancelled and drain_timeout, error otherwise.
 * externalAbort says OpenClaw itself aborted the turn (abortSignal).
 */
export function terminalFor(err, { externalAbort = false } = {}) {
  const error = err instanceof Error ? err : new TeamsterError(err.code, err.message, err.sideEffects);
  switch (resultStatusFor(error.code)) {
    case "timeout":
      return { kind: "timeout", phase: "prompt", source: error.code === "queue_timeout" ? "run_budget" : "runtime", failure: { source: "prompt", error } };
    case "cancelled":
      if (error.code === "cancelled") {
        return { kind: "aborted", source: externalAbort ? "external" : "runtime", failure: { source: "prompt", error } };
      }
      // drain_timeout: the fleet stopped the turn, not the user.
      return { kind: "failed", source: "prompt", error };
    default:
      return { kind: "failed", source: "prompt", error };
  }
}

/**
 * baseResult is an attempt result with every required field of OpenClaw's
 * EmbeddedRunAttemptResult.
 */
export function baseResult(params, ctx) {
  return {
    terminal: { kind: "ok" },
    sessionIdUsed: params.sessionId,
    agentHarnessId: ctx.harnessId,
    messagesSnapshot: [],
    assistantTexts: [],
    toolMetas: [],
    lastAssistant: undefined,
    didSendViaMessagingTool: false,
    messagingToolSentTexts: [],
    messagingToolSentMediaUrls: [],
    messagingToolSentTargets: [],
    cloudCodeAssistFormatError: false,
    replayMetadata: { hadPotentialSideEffects: false, replaySafe: true },
    itemLifecycle: { startedCount: 0, completedCount: 0, activeCount: 0 },
  };
}

/**
 * mapResult turns a teamster result into OpenClaw's attempt result.
 * ctx: {harnessId, api, toolMetas, externalAbort, now}.
 */
export function mapResult(params, r, ctx) {
  const out = baseResult(params, ctx);
  const texts = (r.assistantTexts ?? []).filter((t) => typeof t === "string");
  const text = replyText(texts);
  const outputTokens = Number.isFinite(r.usage?.outputTokens) ? r.usage.outputTokens : 0;
  out.toolMetas = ctx.toolMetas ?? [];
  // Every tool call the fleet's harness made through the host started and
  // completed there (the host answered it): OpenClaw reads these counts to
  // tell a tool-only turn, which it then asks to finalize.
  out.itemLifecycle = { startedCount: out.toolMetas.length, completedCount: out.toolMetas.length, activeCount: 0 };
  out.assistantTexts = texts.filter((t) => t.length > 0);
  const msgCtx = { provider: params.provider, modelId: params.modelId, api: ctx.api, outputTokens, now: ctx.now };
  if (r.status === "ok") {
    const last = assistantMessage(text, msgCtx);
    out.lastAssistant = last;
    out.currentAttemptAssistant = last;
    out.currentAttemptCompletedAssistant = last;
    out.hasSuccessfulModelResponse = true;
    out.messagesSnapshot = [last];
    if (r.classification === "empty" || r.classification === "reasoning-only" || r.classification === "planning-only") {
      out.agentHarnessResultClassification = r.classification;
    }
    if (r.runtimeArtifact && typeof r.runtimeArtifact.id === "string") out.runtimeArtifact = { ...r.runtimeArtifact };
  } else {
    const err = TeamsterError.from(r.error, `the fleet ended the attempt with status ${r.status}`);
    const message = describeError(err, r.attemptId);
    const wrapped = new TeamsterError(err.code, message, err.sideEffects);
    wrapped.attemptId = r.attemptId;
    out.terminal = terminalFor(wrapped, { externalAbort: ctx.externalAbort });
    out.lastAssistant = assistantMessage(text, { ...msgCtx, stopReason: err.code === "cancelled" ? "aborted" : "error", errorMessage: message });
    out.currentAttemptAssistant = text ? out.lastAssistant : undefined;
    // After a claim the fleet may have acted: never replay the turn elsewhere.
    const possible = err.sideEffects !== "none";
    out.replayMetadata = { hadPotentialSideEffects: possible, replaySafe: !possible };
  }
  if (r.lastToolError && typeof r.lastToolError === "object" && typeof r.lastToolError.toolName === "string") {
    out.lastToolError = r.lastToolError;
  }
  return out;
}

/**
 * failureResult is the attempt result of a turn that never got a teamster
 * result: the fleet unreachable, the submit rejected, a fallback reply.
 */
export function failureResult(params, err, ctx) {
  const out = baseResult(params, ctx);
  const e = err instanceof TeamsterError ? err : new TeamsterError("internal", err?.message ?? String(err), "none");
  out.terminal = terminalFor(e, { externalAbort: ctx.externalAbort });
  out.lastAssistant = assistantMessage("", { provider: params.provider, modelId: params.modelId, api: ctx.api, stopReason: "error", errorMessage: e.message, now: ctx.now });
  out.currentAttemptAssistant = undefined;
  const possible = e.sideEffects === "possible";
  out.replayMetadata = { hadPotentialSideEffects: possible, replaySafe: !possible };
  return out;
}
