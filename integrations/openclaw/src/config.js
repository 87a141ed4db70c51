// Plugin configuration: plugins.entries.<id>.config in OpenClaw's config,
// validated and filled with defaults. Pure: no I/O.

import { MAX_SETTLEMENT_TIMEOUT_MS, MAX_TIMEOUT_MS, validId } from "./wire.js";

export const DEFAULTS = Object.freeze({
  natsUrl: "nats://127.0.0.1:4222",
  harnessId: "teamster",
  connectTimeoutMs: 3000,
  requestTimeoutMs: 10000,
  queueTimeoutMs: 600000,
  settlementTimeoutMs: 30000,
  resultPollMs: 3000,
  advertiseTools: true,
});

/**
 * resolveConfig validates raw plugin config and applies defaults. env supplies
 * TEAMSTER_NATS_URL when natsUrl is not configured. Throws an Error naming the
 * first bad key.
 *
 * Keys:
 *   natsUrl            NATS URL(s) of the fleet (string or list)
 *   credsFile          NATS credentials file (JWT + nkey seed)
 *   token              NATS token; user / password: NATS user and password
 *   connectTimeoutMs   time to connect before a turn fails closed
 *   requestTimeoutMs   submit, inject and cancel request timeout
 *   queueTimeoutMs     how long an attempt may wait for a worker
 *   settlementTimeoutMs  backend settlement budget after a turn ends
 *   timeoutMs          cap on the turn's execution timeout (default: OpenClaw's)
 *   resultPollMs       how often the durable result is checked while waiting
 *   hostId             host id for host callbacks (default: generated per process)
 *   delegatePluginId   submit as this delegate (teamster.submit.delegate.<id>)
 *   harnessId          the OpenClaw harness id this plugin registers ("teamster")
 *   advertiseTools     send OpenClaw's tool surface with each attempt
 *   routes             { "<provider>" | "<provider>/<model>": route }, route =
 *                      { provider?, modelId?, runtime?, compatibleIds?, requestTransportOverrides? }
 */
export function resolveConfig(raw = {}, env = {}) {
  if (raw === null || raw === undefined) raw = {};
  if (typeof raw !== "object" || Array.isArray(raw)) throw new Error("teamster plugin config must be an object");
  const c = { ...DEFAULTS };
  const natsUrl = raw.natsUrl ?? env.TEAMSTER_NATS_URL ?? DEFAULTS.natsUrl;
  if (Array.isArray(natsUrl)) {
    if (natsUrl.length === 0 || !natsUrl.every((u) => typeof u === "string" && u)) throw new Error("natsUrl must be a URL or a non-empty list of URLs");
  } else if (typeof natsUrl !== "string" || !natsUrl) {
    throw new Error("natsUrl must be a URL or a non-empty list of URLs");
  }
  c.natsUrl = natsUrl;
  for (const k of ["credsFile", "token", "user", "password"]) {
    if (raw[k] !== undefined) {
      if (typeof raw[k] !== "string" || !raw[k]) throw new Error(`${k} must be a non-empty string`);
      c[k] = raw[k];
    }
  }
  if ((c.user === undefined) !== (c.password === undefined)) throw new Error("user and password go together");
  const ms = (k, min, max) => {
    if (raw[k] === undefined) return;
    if (!Number.isInteger(raw[k]) || raw[k] < min || raw[k] > max) throw new Error(`${k} must be an integer from ${min} to ${max}`);
    c[k] = raw[k];
  };
  ms("connectTimeoutMs", 1, 600000);
  ms("requestTimeoutMs", 1, 600000);
  ms("queueTimeoutMs", 1, MAX_TIMEOUT_MS);
  ms("settlementTimeoutMs", 0, MAX_SETTLEMENT_TIMEOUT_MS);
  ms("timeoutMs", 1, MAX_TIMEOUT_MS);
  ms("resultPollMs", 50, 600000);
  for (const k of ["hostId", "delegatePluginId", "harnessId"]) {
    if (raw[k] !== undefined) {
      if (!validId(raw[k])) throw new Error(`${k} must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`);
      c[k] = raw[k];
    }
  }
  if (raw.advertiseTools !== undefined) {
    if (typeof raw.advertiseTools !== "boolean") throw new Error("advertiseTools must be a boolean");
    c.advertiseTools = raw.advertiseTools;
  }
  c.routes = {};
  if (raw.routes !== undefined) {
    if (!raw.routes || typeof raw.routes !== "object" || Array.isArray(raw.routes)) throw new Error("routes must be an object keyed by provider or provider/model");
    for (const [key, r] of Object.entries(raw.routes)) c.routes[key] = resolveRoute(key, r);
  }
  return c;
}

function resolveRoute(key, r) {
  const where = `routes[${JSON.stringify(key)}]`;
  if (!r || typeof r !== "object" || Array.isArray(r)) throw new Error(`${where} must be an object`);
  const out = {};
  for (const k of ["provider", "modelId"]) {
    if (r[k] !== undefined) {
      if (typeof r[k] !== "string" || !r[k]) throw new Error(`${where}.${k} must be a non-empty string`);
      out[k] = r[k];
    }
  }
  if (r.runtime !== undefined) {
    if (!validId(r.runtime)) throw new Error(`${where}.runtime must be a fleet harness id`);
    out.runtime = r.runtime;
  }
  if (r.compatibleIds !== undefined) {
    if (!Array.isArray(r.compatibleIds) || !r.compatibleIds.every(validId)) throw new Error(`${where}.compatibleIds must be a list of fleet harness ids`);
    out.compatibleIds = [...r.compatibleIds];
  }
  if (r.requestTransportOverrides !== undefined) {
    if (r.requestTransportOverrides !== "none" && r.requestTransportOverrides !== "present") throw new Error(`${where}.requestTransportOverrides must be none or present`);
    out.requestTransportOverrides = r.requestTransportOverrides;
  }
  return out;
}

/** The configured route for provider/model: "provider/model" first, then "provider". */
export function findRoute(cfg, provider, modelId) {
  if (!provider) return undefined;
  return (modelId && cfg.routes[`${provider}/${modelId}`]) || cfg.routes[provider];
}

/** The JSON schema of the config, for openclaw.plugin.json's configSchema. */
export const CONFIG_KEYS = [
  "natsUrl", "credsFile", "token", "user", "password", "connectTimeoutMs", "requestTimeoutMs",
  "queueTimeoutMs", "settlementTimeoutMs", "timeoutMs", "resultPollMs", "hostId", "delegatePluginId",
  "harnessId", "advertiseTools", "routes",
];
