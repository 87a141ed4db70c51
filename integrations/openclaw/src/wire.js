// The teamster wire contract as this plugin speaks it (docs/PROTOCOL.md, "Subjects",
// "Envelopes", "Error codes"). Pure: no I/O.

export const VERSION = 1;

/** Identifiers used in subjects (docs/PROTOCOL.md, "Subjects"). */
export const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

export const SUBJECT_SUBMIT = "teamster.submit";
export const SUBJECT_INJECT = "teamster.inject";
/**
 * A gateway's reads, answered by the fleet's routers (never JetStream, which
 * a gateway may not call at all): an attempt's durable result, and the
 * harnesses the live workers advertise.
 */
export const SUBJECT_GET_RESULT = "teamster.get.result";
export const SUBJECT_GET_HARNESSES = "teamster.get.harnesses";

/** Bounds of an attempt's timeouts (docs/PROTOCOL.md, "Envelopes"). */
export const MAX_TIMEOUT_MS = 86_400_000;
export const MAX_SETTLEMENT_TIMEOUT_MS = 3_600_000;
export const MAX_BODY = 1 << 20;

/** Every error code of docs/PROTOCOL.md, with the result status it implies. */
export const ERROR_CODES = Object.freeze([
  "invalid_request",
  "payload_too_large",
  "harness_not_registered",
  "harness_unsupported_route",
  "delegation_denied",
  "owner_only",
  "session_busy",
  "no_active_run",
  "injection_requires_v2",
  "source_revoked",
  "queue_timeout",
  "worker_lost",
  "lease_lost",
  "deadline_exceeded",
  "cancelled",
  "drain_timeout",
  "runtime_artifact_mismatch",
  "harness_failed",
  "internal",
]);

const KNOWN_CODES = new Set(ERROR_CODES);

/** Reports whether code is one of the contract's error codes. */
export function isErrorCode(code) {
  return KNOWN_CODES.has(code);
}

/** The status a result carrying code has (docs/PROTOCOL.md, "Error codes"). */
export function resultStatusFor(code) {
  switch (code) {
    case "deadline_exceeded":
    case "queue_timeout":
      return "timeout";
    case "cancelled":
    case "drain_timeout":
      return "cancelled";
    default:
      return "error";
  }
}

export function validId(s) {
  return typeof s === "string" && ID_PATTERN.test(s);
}

export function checkId(field, s) {
  if (!validId(s)) {
    throw new TeamsterError("invalid_request", `${field} ${JSON.stringify(String(s).slice(0, 80))} does not match ${ID_PATTERN}`);
  }
  return s;
}

export const SUBJECT_SESSION = "teamster.session";
export const SUBJECT_SOURCE_GRANT = "teamster.source.grant";
export const SUBJECT_SOURCE_REVOKE = "teamster.source.revoke";

/** The session operations of teamster.session.<op> (docs/PROTOCOL.md, "Sessions"). */
export const SESSION_OPS = Object.freeze(["create", "patch", "reset", "delete", "archive"]);

/**
 * identified is a router-bound subject in the sender's identified form: a
 * gateway with an identity (gatewayId) is a tenant, and every request it
 * sends goes on <subject>.gateway.<gatewayId>, the only form the fleet's
 * NATS permissions let it publish; the router takes the tenant from that
 * last token, never from a body. Without a gatewayId (a fleet without
 * per-principal permissions) it is the plain subject.
 */
export function identified(subject, gatewayId) {
  if (gatewayId === undefined || gatewayId === null || gatewayId === "") return subject;
  return `${subject}.gateway.${checkId("gatewayId", gatewayId)}`;
}

/** teamster.submit.gateway.<gatewayId>: an owner submit from a gateway with an identity. */
export function submitGatewaySubject(gatewayId) {
  return `teamster.submit.gateway.${checkId("gatewayId", gatewayId)}`;
}

/**
 * teamster.submit.delegate.<pluginId>: a delegate's submit; a delegate bound
 * to gateway gatewayId (the tenant whose sessions it continues) submits on
 * teamster.submit.delegate.<pluginId>.gateway.<gatewayId>.
 */
export function submitDelegateSubject(pluginId, gatewayId) {
  return identified(`teamster.submit.delegate.${checkId("pluginId", pluginId)}`, gatewayId);
}

/** teamster.inject (a source-bound injection), identified for a gateway. */
export function injectSubject(gatewayId) {
  return identified(SUBJECT_INJECT, gatewayId);
}

/** teamster.run.<attemptId>.inject, identified for a gateway. */
export function runInjectSubject(attemptId, gatewayId) {
  return identified(`teamster.run.${checkId("attemptId", attemptId)}.inject`, gatewayId);
}

/** teamster.run.<attemptId>.cancel, identified for a gateway. */
export function runCancelSubject(attemptId, gatewayId) {
  return identified(`teamster.run.${checkId("attemptId", attemptId)}.cancel`, gatewayId);
}

/** teamster.run.<attemptId>.read (reply media from the run's workspace), identified for a gateway. */
export function runReadSubject(attemptId, gatewayId) {
  return identified(`teamster.run.${checkId("attemptId", attemptId)}.read`, gatewayId);
}

/** teamster.session.<op>, identified for a gateway. */
export function sessionOpSubject(op, gatewayId) {
  if (!SESSION_OPS.includes(op)) throw new TeamsterError("invalid_request", `session operation ${JSON.stringify(String(op).slice(0, 40))} is not one of ${SESSION_OPS.join(", ")}`);
  return identified(`${SUBJECT_SESSION}.${op}`, gatewayId);
}

/** teamster.source.grant, identified for a gateway. */
export function sourceGrantSubject(gatewayId) {
  return identified(SUBJECT_SOURCE_GRANT, gatewayId);
}

/** teamster.source.revoke, identified for a gateway. */
export function sourceRevokeSubject(gatewayId) {
  return identified(SUBJECT_SOURCE_REVOKE, gatewayId);
}

/**
 * teamster.get.result, identified for a gateway: the routers answer with the
 * durable result of one of the sender's attempts (body {v, attemptId}).
 */
export function getResultSubject(gatewayId) {
  return identified(SUBJECT_GET_RESULT, gatewayId);
}

/**
 * teamster.get.harnesses, identified for a gateway: the routers answer with
 * the manifests the live workers advertise (body {v}).
 */
export function getHarnessesSubject(gatewayId) {
  return identified(SUBJECT_GET_HARNESSES, gatewayId);
}

/** teamster.host.<hostId>.<attemptId>.> : every host callback of one attempt. */
export function hostSubjects(hostId, attemptId) {
  return `teamster.host.${checkId("hostId", hostId)}.${checkId("attemptId", attemptId)}.>`;
}

/** The call (tool, toolTerminal, userInput, usage) of a host callback subject. */
export function hostCallOf(subject) {
  const i = subject.lastIndexOf(".");
  return i < 0 ? "" : subject.slice(i + 1);
}

/**
 * TeamsterError is the one error type: a contract code, a message and, for
 * failed attempts, whether side effects are possible.
 */
export class TeamsterError extends Error {
  constructor(code, message, sideEffects) {
    super(message || code);
    this.name = "TeamsterError";
    this.code = isErrorCode(code) ? code : "internal";
    if (sideEffects) this.sideEffects = sideEffects;
  }

  /** The wire form ({code, message, sideEffects?}). */
  toJSON() {
    const o = { code: this.code, message: this.message };
    if (this.sideEffects) o.sideEffects = this.sideEffects;
    return o;
  }

  /** An error decoded from a reply's or result's error field. */
  static from(wire, fallbackMessage = "") {
    if (!wire || typeof wire !== "object") return new TeamsterError("internal", fallbackMessage || "the fleet sent no error");
    const code = isErrorCode(wire.code) ? wire.code : "internal";
    const message = typeof wire.message === "string" && wire.message ? wire.message : fallbackMessage || code;
    return new TeamsterError(code, message, wire.sideEffects === "none" || wire.sideEffects === "possible" ? wire.sideEffects : undefined);
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Encodes an envelope; bodies over 1 MiB are payload_too_large. */
export function encode(obj) {
  const b = encoder.encode(JSON.stringify(obj));
  if (b.length > MAX_BODY) throw new TeamsterError("payload_too_large", `the body is ${b.length} bytes, over 1 MiB`);
  return b;
}

/** Decodes a JSON object envelope with v: 1; anything else is invalid_request. */
export function decode(bytes) {
  let o;
  try {
    o = JSON.parse(typeof bytes === "string" ? bytes : decoder.decode(bytes));
  } catch (err) {
    throw new TeamsterError("invalid_request", `the body is not JSON: ${err.message}`);
  }
  if (!o || typeof o !== "object" || Array.isArray(o)) throw new TeamsterError("invalid_request", "the body is not a JSON object");
  if (o.v !== VERSION) throw new TeamsterError("invalid_request", `field v is ${JSON.stringify(o.v)}, not ${VERSION}`);
  return o;
}

/**
 * Checks a decoded result the way the Go bus does: its status follows its
 * error code; an ok result carries no error. Returns the result.
 */
export function validateResult(r) {
  if (!validId(r.attemptId)) throw new TeamsterError("invalid_request", "result without a valid attemptId");
  if (r.status === "ok") {
    if (r.error) throw new TeamsterError("invalid_request", "an ok result carries no error");
  } else if (r.status === "error" || r.status === "cancelled" || r.status === "timeout") {
    if (!r.error || !isErrorCode(r.error.code)) throw new TeamsterError("invalid_request", `a ${r.status} result carries an error with a known code`);
    if (resultStatusFor(r.error.code) !== r.status) {
      throw new TeamsterError("invalid_request", `a result with code ${r.error.code} has status ${resultStatusFor(r.error.code)}, not ${r.status}`);
    }
  } else {
    throw new TeamsterError("invalid_request", `result status ${JSON.stringify(r.status)} is not ok, error, cancelled or timeout`);
  }
  if (!Array.isArray(r.assistantTexts)) r.assistantTexts = [];
  return r;
}

/** A fresh attempt id: a ULID-shaped (26 chars, Crockford base32) id. */
export function newAttemptId(now = Date.now(), random = cryptoRandom) {
  const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
  let t = now;
  let time = "";
  for (let i = 0; i < 10; i++) {
    time = alphabet[t % 32] + time;
    t = Math.floor(t / 32);
  }
  const bytes = random(16);
  let rand = "";
  for (let i = 0; i < 16; i++) rand += alphabet[bytes[i] % 32];
  return time + rand;
}

function cryptoRandom(n) {
  const b = new Uint8Array(n);
  globalThis.crypto.getRandomValues(b);
  return b;
}
