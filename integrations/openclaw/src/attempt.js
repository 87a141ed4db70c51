// Building a teamster prepared attempt from OpenClaw's attempt params. Pure.

import { findRoute } from "./config.js";
import { MAX_SETTLEMENT_TIMEOUT_MS, MAX_TIMEOUT_MS, VERSION, validId } from "./wire.js";

/**
 * routeFacts returns the fleet's view of the prepared route: the provider and
 * model to send, the runtimePolicy / requestTransportOverrides facts, the
 * several routes when auth preparation left more than one, and the fleet
 * runtime the operator pinned (route.runtime). Configured route facts win over
 * the ones OpenClaw prepared: a custom provider that only exists to reach the
 * fleet has no provider-owned runtimePolicy.
 *
 * prepared is OpenClaw's modelProvider projection: ctx.modelProvider in
 * supports(), or runtimePlan.auth.modelRoute in runAttempt.
 */
export function routeFacts(cfg, provider, modelId, prepared, deferred) {
  const route = findRoute(cfg, provider, modelId);
  const compatibleIds = route?.compatibleIds ?? prepared?.runtimePolicy?.compatibleIds ?? deferred?.runtimePolicy?.compatibleIds;
  const overrides = route?.requestTransportOverrides ?? prepared?.requestTransportOverrides ?? deferred?.requestTransportOverrides ?? "none";
  const modelProvider = { requestTransportOverrides: overrides === "present" ? "present" : "none" };
  if (Array.isArray(compatibleIds)) modelProvider.runtimePolicy = { compatibleIds: compatibleIds.filter(validId) };
  const src = prepared?.preparedAuth?.source;
  if (typeof src === "string" && src) modelProvider.preparedAuth = { source: src };
  return {
    configured: route !== undefined,
    provider: route?.provider ?? provider,
    modelId: route?.modelId ?? modelId,
    runtime: route?.runtime,
    modelProvider,
  };
}

function clampMs(v, min, max, dflt) {
  if (!Number.isFinite(v)) return dflt;
  return Math.min(max, Math.max(min, Math.round(v)));
}

/** The OpenClaw pins that name this plugin's own harness mean "the fleet's runtime". */
function fleetPin(pin, cfg, runtime) {
  if (typeof pin !== "string" || !pin || pin === "auto" || pin === "default") return undefined;
  if (pin === cfg.harnessId) return runtime;
  // A pin naming another runtime (an id the fleet may host) travels as is.
  return validId(pin) && pin !== "openclaw" ? pin : undefined;
}

/**
 * buildAttempt maps OpenClaw's attempt params onto teamster's prepared
 * attempt (docs/PROTOCOL.md, "Envelopes"). opts: {attemptId, replyTo, hostId, tools}.
 * Secrets never travel: only the auth profile's id (authProfileRef).
 */
export function buildAttempt(params, cfg, opts) {
  const plannedRoute = params.runtimePlan?.auth?.modelRoute;
  const deferred = params.runtimePlan?.auth?.deferredRouteSupport;
  const facts = routeFacts(cfg, params.provider, params.modelId, plannedRoute, deferred);
  const a = {
    v: VERSION,
    attemptId: opts.attemptId,
    agentId: params.agentId || "main",
    sessionKey: params.sessionKey || params.sessionId,
    sessionId: params.sessionId,
    provider: facts.provider,
    modelId: facts.modelId,
    modelProvider: facts.modelProvider,
    prompt: typeof params.prompt === "string" ? params.prompt : "",
    timeoutMs: clampMs(Math.min(params.timeoutMs ?? Infinity, cfg.timeoutMs ?? Infinity), 1, MAX_TIMEOUT_MS, 600000),
    queueTimeoutMs: clampMs(cfg.queueTimeoutMs, 1, MAX_TIMEOUT_MS, 600000),
    settlementTimeoutMs: clampMs(cfg.settlementTimeoutMs, 0, MAX_SETTLEMENT_TIMEOUT_MS, 30000),
    modelSelectionLocked: params.modelSelectionLocked === true,
  };
  if (validId(params.runId) || (typeof params.runId === "string" && params.runId)) a.runId = params.runId;
  const storePath = params.sessionTarget?.storePath ?? params.storePath;
  if (typeof storePath === "string" && storePath) a.storePath = storePath;
  const pin = fleetPin(params.agentHarnessId, cfg, facts.runtime);
  const override = fleetPin(params.agentHarnessRuntimeOverride, cfg, facts.runtime);
  if (pin) a.agentHarnessId = pin;
  if (override) a.agentHarnessRuntimeOverride = override;
  if (!pin && !override && facts.runtime) a.agentHarnessRuntimeOverride = facts.runtime;
  if (opts.replyTo) a.replyTo = opts.replyTo;
  if (opts.hostId) a.hostId = opts.hostId;
  if (Array.isArray(params.images) && params.images.length > 0) {
    a.images = params.images.filter((i) => i && typeof i === "object" && !Array.isArray(i));
  }
  if (Array.isArray(opts.tools) && opts.tools.length > 0) a.tools = opts.tools;
  if (Array.isArray(params.toolsAllow)) a.toolsAllow = params.toolsAllow.filter((n) => typeof n === "string" && n);
  if (params.disableTools === true) a.toolsAllow = [];
  if (params.captureRuntimeArtifact === true) a.captureRuntimeArtifact = true;
  if (opts.operation) {
    // A fleet operation (settled-tool-finalization): tool-less by contract.
    a.operation = opts.operation;
    a.toolsAllow = [];
    delete a.tools;
  }
  // OpenClaw offers to stage reply attachments read from the harness's
  // workspace (the turn has a workspace): the worker's is the fleet's.
  if (opts.hostId && typeof params.hostCapabilities?.prepareReplyMedia === "function" && params.workspaceDir) a.stageReplyMedia = true;
  const want = params.expectedRuntimeArtifact;
  if (want && typeof want.id === "string" && typeof want.fingerprint === "string") {
    a.expectedRuntimeArtifact = { id: want.id, fingerprint: want.fingerprint };
  }
  if (typeof params.authProfileId === "string" && params.authProfileId) a.authProfileRef = params.authProfileId;
  return a;
}

/** describeTools projects OpenClaw tools onto the attempt's tools field. */
export function describeTools(tools) {
  const out = [];
  for (const t of tools ?? []) {
    if (!t || typeof t.name !== "string" || !t.name) continue;
    const d = { name: t.name };
    if (typeof t.description === "string") d.description = t.description;
    const schema = t.parameters ?? t.inputSchema;
    if (schema && typeof schema === "object" && !Array.isArray(schema)) d.inputSchema = JSON.parse(JSON.stringify(schema));
    out.push(d);
  }
  return out;
}
