// Plugin configuration: plugins.entries.<id>.config in OpenClaw's config,
// validated and filled with defaults. Pure: no I/O.

import { ID_PATTERN, MAX_SETTLEMENT_TIMEOUT_MS, MAX_TIMEOUT_MS, validId } from "./wire.js";

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
 * The environment variables that fill a key the plugin config leaves out
 * (the names the teamster CLI reads, where it has the same setting).
 * TEAMSTER_NATS_NKEY applies only when the config names no NATS
 * authentication at all (credsFile, token, user, nkeyFile).
 */
export const ENV = Object.freeze({
  natsUrl: "TEAMSTER_NATS_URL",
  gatewayId: "TEAMSTER_GATEWAY_ID",
  inboxPrefix: "TEAMSTER_NATS_INBOX_PREFIX",
  nkeyFile: "TEAMSTER_NATS_NKEY",
  tlsCaFile: "TEAMSTER_NATS_TLS_CA",
});

/** An inbox prefix: dot-separated tokens of letters, digits, _ and -, no wildcards. */
export const INBOX_PREFIX_PATTERN = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;
const MAX_INBOX_PREFIX = 200;

/**
 * resolveConfig validates raw plugin config and applies defaults. env (the
 * process environment) fills the keys of ENV that the config leaves out.
 * opts.defaultHostId is the hostId when neither hostId nor gatewayId is
 * configured (the plugin passes one generated per process). Throws an Error
 * naming the first bad key.
 *
 * Keys:
 *   natsUrl            NATS URL(s) of the fleet (string or list)
 *   gatewayId          this gateway's identity on the fleet (its tenant):
 *                      submits go to teamster.submit.gateway.<gatewayId>,
 *                      every other request to its identified subject
 *                      (<subject>.gateway.<gatewayId>), hostId is it, and
 *                      the inbox prefix defaults to _INBOX.gateway.<gatewayId>;
 *                      with delegatePluginId, the gateway the delegate is
 *                      bound to
 *   inboxPrefix        prefix of every reply subject the connection asks for
 *                      (default: _INBOX.gateway.<gatewayId>; for a delegate
 *                      _INBOX.delegate.<gatewayId>.<delegatePluginId>, or
 *                      _INBOX.delegate.<delegatePluginId> unbound; else _INBOX)
 *   credsFile          NATS credentials file (JWT + nkey seed)
 *   nkeyFile           NATS NKey seed file (the user seed, SU...)
 *   token              NATS token; user / password: NATS user and password
 *   tlsCaFile          CA certificate(s) (PEM) that the NATS server's certificate
 *                      must chain to; the connection then requires TLS
 *   connectTimeoutMs   time to connect before a turn fails closed
 *   requestTimeoutMs   submit, inject and cancel request timeout
 *   queueTimeoutMs     how long an attempt may wait for a worker
 *   settlementTimeoutMs  backend settlement budget after a turn ends
 *   timeoutMs          cap on the turn's execution timeout (default: OpenClaw's)
 *   resultPollMs       how often the durable result is checked while waiting
 *   hostId             host id for host callbacks (default: gatewayId, else
 *                      opts.defaultHostId); with gatewayId it must be gatewayId
 *   delegatePluginId   submit as this delegate: bound to gateway gatewayId,
 *                      on teamster.submit.delegate.<id>.gateway.<gatewayId>
 *                      (the fleet's shipped permissions know only bound
 *                      delegates); without gatewayId, on
 *                      teamster.submit.delegate.<id>
 *   harnessId          the OpenClaw harness id this plugin registers ("teamster")
 *   advertiseTools     send OpenClaw's tool surface with each attempt
 *   routes             { "<provider>" | "<provider>/<model>": route }, route =
 *                      { provider?, modelId?, runtime?, compatibleIds?, requestTransportOverrides? }
 */
export function resolveConfig(raw = {}, env = {}, { defaultHostId } = {}) {
  if (raw === null || raw === undefined) raw = {};
  if (typeof raw !== "object" || Array.isArray(raw)) throw new Error("teamster plugin config must be an object");
  env = env ?? {};
  const c = { ...DEFAULTS };
  const natsUrl = raw.natsUrl ?? env[ENV.natsUrl] ?? DEFAULTS.natsUrl;
  if (Array.isArray(natsUrl)) {
    if (natsUrl.length === 0 || !natsUrl.every((u) => typeof u === "string" && u)) throw new Error("natsUrl must be a URL or a non-empty list of URLs");
  } else if (typeof natsUrl !== "string" || !natsUrl) {
    throw new Error("natsUrl must be a URL or a non-empty list of URLs");
  }
  c.natsUrl = natsUrl;
  for (const k of ["credsFile", "nkeyFile", "token", "user", "password", "tlsCaFile"]) {
    if (raw[k] !== undefined) {
      if (typeof raw[k] !== "string" || !raw[k]) throw new Error(`${k} must be a non-empty string`);
      c[k] = raw[k];
    }
  }
  if ((c.user === undefined) !== (c.password === undefined)) throw new Error("user and password go together");
  const fromEnv = (k) => (typeof env[ENV[k]] === "string" && env[ENV[k]] !== "" ? env[ENV[k]] : undefined);
  // The environment's NKey only when the config chose no authentication:
  // the config's credentials win as a whole.
  if (c.credsFile === undefined && c.nkeyFile === undefined && c.token === undefined && c.user === undefined && fromEnv("nkeyFile")) {
    c.nkeyFile = fromEnv("nkeyFile");
  }
  if (c.tlsCaFile === undefined && fromEnv("tlsCaFile")) c.tlsCaFile = fromEnv("tlsCaFile");
  if (c.credsFile !== undefined && c.nkeyFile !== undefined) {
    throw new Error(`credsFile and nkeyFile (or ${ENV.nkeyFile}) are two NATS identities: configure one`);
  }
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
  for (const k of ["gatewayId", "hostId", "delegatePluginId", "harnessId"]) {
    if (raw[k] !== undefined) {
      if (!validId(raw[k])) throw new Error(`${k} must match ${ID_PATTERN.source}`);
      c[k] = raw[k];
    }
  }
  if (c.gatewayId === undefined && fromEnv("gatewayId") !== undefined) {
    if (!validId(fromEnv("gatewayId"))) throw new Error(`${ENV.gatewayId} (gatewayId) must match ${ID_PATTERN.source}`);
    c.gatewayId = fromEnv("gatewayId");
  }
  if (c.gatewayId !== undefined) {
    // A gateway's host callbacks go to its own host id (a bound delegate's
    // to its gateway's): the fleet refuses an attempt whose hostId is not
    // the submitter's tenant.
    if (c.hostId !== undefined && c.hostId !== c.gatewayId) {
      throw new Error(`hostId ${JSON.stringify(c.hostId)} is not gatewayId ${JSON.stringify(c.gatewayId)}: a gateway's hostId is its gatewayId (leave hostId out)`);
    }
    c.hostId = c.gatewayId;
  } else if (c.hostId === undefined && defaultHostId !== undefined) {
    c.hostId = defaultHostId;
  }
  const inboxPrefix = raw.inboxPrefix ?? fromEnv("inboxPrefix");
  if (inboxPrefix !== undefined) {
    if (typeof inboxPrefix !== "string" || inboxPrefix.length > MAX_INBOX_PREFIX || !INBOX_PREFIX_PATTERN.test(inboxPrefix)) {
      throw new Error(`inboxPrefix must be dot-separated tokens of letters, digits, _ and - (no wildcards), at most ${MAX_INBOX_PREFIX} characters`);
    }
    c.inboxPrefix = inboxPrefix;
  } else if (c.delegatePluginId !== undefined) {
    // A delegate bound to a gateway reads its replies under
    // _INBOX.delegate.<gatewayId>.<pluginId>, the only inbox its
    // permissions give it and where the fleet sends them.
    c.inboxPrefix = c.gatewayId !== undefined ? `_INBOX.delegate.${c.gatewayId}.${c.delegatePluginId}` : `_INBOX.delegate.${c.delegatePluginId}`;
  } else if (c.gatewayId !== undefined) {
    c.inboxPrefix = `_INBOX.gateway.${c.gatewayId}`;
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

/** The config's keys: the properties of openclaw.plugin.json's configSchema. */
export const CONFIG_KEYS = [
  "natsUrl", "gatewayId", "inboxPrefix", "credsFile", "nkeyFile", "token", "user", "password", "tlsCaFile",
  "connectTimeoutMs", "requestTimeoutMs", "queueTimeoutMs", "settlementTimeoutMs", "timeoutMs", "resultPollMs",
  "hostId", "delegatePluginId", "harnessId", "advertiseTools", "routes",
];
