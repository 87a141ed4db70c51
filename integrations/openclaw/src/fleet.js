// Fleet: the plugin's one NATS connection to a teamster fleet, shared by every
// turn of this OpenClaw process. It connects lazily (the first turn, or the
// gateway service start), keeps a cached copy of the harnesses the fleet
// hosts (teamster.get.harnesses, asked every REGISTRY_POLL_MS) for
// supports(), and fails closed with the NATS URL in every error when the
// fleet cannot be reached.
//
// What it asks of NATS stays within a gateway's shipped permissions: every
// reply subject under the configured inbox prefix (the connection's
// inboxPrefix: request replies and the attempts' replyTo), and every request
// on its identified subject when it has a gatewayId (wire.js identified),
// the reads of durable results (teamster.get.result) and of the harnesses
// (teamster.get.harnesses) among them. It makes no JetStream API call at
// all ($JS.>, $KV.> and $O.> are denied to every gateway): NATS checks no
// permission on a request's reply subject, and JetStream stores its answer
// wherever a stream captures that subject, so the routers answer these
// reads instead.

import { readFileSync } from "node:fs";
import {
  connect as natsConnect, credsAuthenticator, nkeyAuthenticator, NoRespondersError, PermissionViolationError, TimeoutError, createInbox,
} from "@nats-io/transport-node";
import {
  SUBJECT_GET_HARNESSES, TeamsterError, VERSION, checkId, decode, encode, getHarnessesSubject, getResultSubject, validateResult,
} from "./wire.js";
import { Registry } from "./registry.js";

/**
 * How often the registry is read: the workers' heartbeat period
 * (bus.HeartbeatInterval), so a worker's new state shows within one beat.
 */
export const REGISTRY_POLL_MS = 2000;

/** The longest a registry or durable result read waits for the routers' answer. */
const READ_TIMEOUT_MS = 5000;

/** An NKey user seed (base32, 58 characters, SU...). */
const USER_SEED = /\bSU[A-Z2-7]{56}\b/;

/**
 * readNkeySeed returns the user seed in an NKey seed file (the file may hold
 * comments or other lines around it, as nsc writes them).
 */
export function readNkeySeed(path, readFile = readFileSync) {
  let text;
  try {
    text = readFile(path, "utf8").toString();
  } catch (err) {
    throw new Error(`cannot read nkeyFile ${path}: ${err?.message ?? err}`);
  }
  const m = text.match(USER_SEED);
  if (!m) throw new Error(`nkeyFile ${path} holds no NKey user seed (a line SU...)`);
  return new TextEncoder().encode(m[0]);
}

/** Options a NATS connect call gets from the plugin config. */
export function connectOptions(cfg, readFile = readFileSync) {
  const o = {
    servers: cfg.natsUrl,
    name: `openclaw-teamster-${cfg.gatewayId ?? cfg.delegatePluginId ?? cfg.hostId}`,
    timeout: cfg.connectTimeoutMs,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
  };
  // Every reply subject this connection asks for (request muxing,
  // createInbox in newInbox) starts with it.
  if (cfg.inboxPrefix) o.inboxPrefix = cfg.inboxPrefix;
  if (cfg.credsFile) o.authenticator = credsAuthenticator(readFile(cfg.credsFile));
  // The seed is read when the server asks for it (each connect and
  // reconnect), so that a rotated file is picked up and a fleet that is not
  // listening fails as unreachable.
  if (cfg.nkeyFile) o.authenticator = nkeyAuthenticator(() => readNkeySeed(cfg.nkeyFile, readFile));
  if (cfg.token) o.token = cfg.token;
  if (cfg.user) {
    o.user = cfg.user;
    o.pass = cfg.password;
  }
  // TLS: verified against tlsCaFile when one is configured, else against the
  // system's roots when a URL says tls:// (the client would otherwise use
  // TLS only when the server requires it).
  const urls = Array.isArray(cfg.natsUrl) ? cfg.natsUrl : [cfg.natsUrl];
  if (cfg.tlsCaFile) o.tls = { caFile: cfg.tlsCaFile };
  else if (urls.some((u) => /^tls:\/\//i.test(u))) o.tls = {};
  return o;
}

export class Fleet {
  /**
   * params: {cfg, logger?, connect? (tests), now?, registryPollMs? (tests)}
   */
  constructor({ cfg, logger, connect = natsConnect, now = Date.now, registryPollMs = REGISTRY_POLL_MS }) {
    this.cfg = cfg;
    this.log = logger ?? { info() {}, warn() {}, debug() {} };
    this._connect = connect;
    this.registry = new Registry({ now });
    this.registryPollMs = registryPollMs;
    this._nc = null;
    this._connecting = null;
    this._closed = false;
    this._poller = null;
    this.activeTurns = 0;
    this._holders = new Set();
  }

  /**
   * hold records that one plugin registration uses this fleet; drop(token)
   * ends that use and closes the connection when no registration is left.
   * OpenClaw may register the plugin again (reloads) before it disposes the
   * previous registration's harness, and both share this connection.
   */
  hold(token) {
    this._holders.add(token);
  }

  async drop(token) {
    if (!this._holders.delete(token)) return;
    if (this._holders.size === 0) await this.close();
  }

  /** turnStarted / turnEnded count the turns running on this connection. */
  turnStarted() {
    this.activeTurns++;
  }

  turnEnded() {
    this.activeTurns = Math.max(0, this.activeTurns - 1);
  }

  /** The configured NATS URL(s), as every error names them. */
  get natsUrl() {
    return Array.isArray(this.cfg.natsUrl) ? this.cfg.natsUrl.join(",") : this.cfg.natsUrl;
  }

  /** The registry snapshot supports() reads: null until it was read. */
  registrySnapshot() {
    return this.registry.known && this._nc && !this._disconnected ? this.registry : null;
  }

  /** conn returns the live connection, connecting on first use. */
  async conn() {
    if (this._closed) throw new TeamsterError("internal", `teamster: the plugin's fleet connection to ${this.natsUrl} is closed`, "none");
    if (this._nc && !this._nc.isClosed()) {
      if (this._disconnected) {
        throw new TeamsterError("internal", `teamster: the fleet at ${this.natsUrl} is unreachable (disconnected; reconnecting)`, "none");
      }
      return this._nc;
    }
    if (!this._connecting) {
      this._connecting = this._open().finally(() => {
        this._connecting = null;
      });
    }
    return this._connecting;
  }

  async _open() {
    let nc;
    try {
      nc = await this._connect(connectOptions(this.cfg));
    } catch (err) {
      throw new TeamsterError("internal", `teamster: cannot reach the fleet at ${this.natsUrl}: ${err?.message ?? err}`, "none");
    }
    if (this._closed) {
      await nc.close().catch(() => {});
      throw new TeamsterError("internal", `teamster: the plugin's fleet connection to ${this.natsUrl} is closed`, "none");
    }
    this._nc = nc;
    this._disconnected = false;
    this.log.info?.(`teamster: connected to the fleet at ${this.natsUrl}`);
    const reported = new Set();
    (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") {
          this._disconnected = true;
          this.log.warn?.(`teamster: disconnected from the fleet at ${this.natsUrl}`);
        } else if (s.type === "reconnect") {
          this._disconnected = false;
        } else if (s.type === "error" && s.error) {
          // A permissions violation names the subject the fleet's NATS
          // permissions refused this gateway: the log says which, once per
          // message (a refused registry read would repeat every poll).
          const msg = String(s.error.message ?? s.error);
          if (!reported.has(msg) && reported.size < 100) {
            reported.add(msg);
            this.log.warn?.(`teamster: the fleet's NATS at ${this.natsUrl} reported: ${msg}`);
          }
        }
      }
    })().catch(() => {});
    nc.closed().then((err) => {
      if (this._nc === nc) this._nc = null;
      if (this._nc === null) this.registry.reset();
      if (err) this.log.warn?.(`teamster: fleet connection closed: ${err.message}`);
    });
    this._pollRegistry(nc);
    return nc;
  }

  /**
   * _pollRegistry reads the harnesses the fleet hosts into the registry
   * cache every registryPollMs while nc is the connection; best effort. A
   * failed read (no router, a rejection, a timeout) leaves the registry
   * unknown until a read succeeds, and is logged at debug once per distinct
   * error.
   */
  _pollRegistry(nc) {
    const current = () => this._nc === nc && !nc.isClosed();
    let timer = null;
    let stopped = false;
    let lastError = "";
    const poller = {
      stop: () => {
        stopped = true;
        if (timer) clearTimeout(timer);
        timer = null;
      },
    };
    this._poller = poller;
    const tick = async () => {
      timer = null;
      if (stopped || !current()) return;
      if (!this._disconnected) {
        try {
          const manifests = await this._readRegistry();
          if (!stopped && current()) {
            this.registry.set(manifests);
            this.registry.markKnown();
          }
          lastError = "";
        } catch (err) {
          const msg = err?.message ?? String(err);
          if (msg !== lastError) this.log.debug?.(`teamster: reading the fleet's registry (${SUBJECT_GET_HARNESSES}) at ${this.natsUrl} failed: ${msg}`);
          lastError = msg;
          if (current() || this._nc === null) this.registry.reset();
        }
      }
      if (stopped || !current()) return;
      timer = setTimeout(tick, this.registryPollMs);
      // The poll alone keeps no process alive (agent exec, tests).
      timer.unref?.();
    };
    tick();
  }

  /**
   * _readRegistry asks the routers once for the harnesses the fleet hosts:
   * teamster.get.harnesses (teamster.get.harnesses.gateway.<gatewayId> for
   * a gateway with an identity), body {v: 1}; the reply {v, status: "ok",
   * harnesses: [manifest, ...]} lists the manifests the live (active or
   * draining) workers advertise, as the answering router sees its registry.
   * Returns that list; a rejection or a malformed reply throws.
   */
  async _readRegistry() {
    const subject = getHarnessesSubject(this.cfg.gatewayId);
    const rep = await this.request(subject, { v: VERSION }, Math.min(this.cfg.requestTimeoutMs, READ_TIMEOUT_MS));
    if (rep.status === "rejected") throw rejected(rep, subject, this.natsUrl);
    if (rep.status !== "ok") throw new TeamsterError("internal", `teamster: the reply on ${subject} from ${this.natsUrl} has status ${JSON.stringify(rep.status)}, not ok or rejected`);
    // A Go router's empty list may come as null.
    if (rep.harnesses === undefined || rep.harnesses === null) return [];
    if (!Array.isArray(rep.harnesses)) throw new TeamsterError("internal", `teamster: the reply on ${subject} from ${this.natsUrl} has no harnesses list`);
    return rep.harnesses;
  }

  /** Starts connecting in the background (gateway start); never throws. */
  warmUp() {
    this.conn().catch((err) => this.log.warn?.(err.message));
  }

  /** A fresh reply subject under the configured inbox prefix (default _INBOX). */
  newInbox() {
    return createInbox(this.cfg.inboxPrefix);
  }

  /**
   * request sends an envelope and decodes the reply. No responders and
   * timeouts become TeamsterErrors that name the subject and the URL.
   */
  async request(subject, body, timeoutMs = this.cfg.requestTimeoutMs, { beforeSend } = {}) {
    const nc = await this.conn();
    if (this._disconnected) {
      throw new TeamsterError("internal", `teamster: the fleet at ${this.natsUrl} is unreachable (disconnected; reconnecting)`, "none");
    }
    const data = encode(body);
    // beforeSend runs after every await, synchronously before the publish
    // (steering's assertCurrent); if it throws, nothing was sent.
    beforeSend?.();
    let msg;
    try {
      msg = await nc.request(subject, data, { timeout: timeoutMs });
    } catch (err) {
      if (err instanceof NoRespondersError || err?.cause instanceof NoRespondersError || /no responders/i.test(err?.message ?? "")) {
        // Nobody received the request: certainly not delivered.
        throw new TeamsterError("internal", `teamster: nobody is serving ${subject} at ${this.natsUrl}`, "none");
      }
      const denied = err instanceof PermissionViolationError ? err : err?.cause instanceof PermissionViolationError ? err.cause : null;
      if (denied) {
        // The fleet's NATS permissions refused this connection: the publish
        // (then nothing was delivered) or the reply subscription (then the
        // request may have been).
        const published = denied.operation !== "publish";
        const e = new TeamsterError(
          "internal",
          `teamster: the fleet's NATS at ${this.natsUrl} refused the request on ${subject}: ${denied.message} (check gatewayId, inboxPrefix and the NATS credentials against the fleet's permissions)`,
          published ? undefined : "none",
        );
        if (published) e.uncertain = true;
        throw e;
      }
      if (err instanceof TimeoutError || err?.cause instanceof TimeoutError || /timeout/i.test(err?.message ?? "")) {
        const e = new TeamsterError("internal", `teamster: no reply on ${subject} from ${this.natsUrl} within ${timeoutMs} ms`);
        e.uncertain = true; // the request may have been received
        throw e;
      }
      const e = new TeamsterError("internal", `teamster: request on ${subject} at ${this.natsUrl} failed: ${err?.message ?? err}`);
      e.uncertain = true;
      throw e;
    }
    return decode(msg.data);
  }

  /** subscribe calls onMsg({subject, data, respond(obj)}) for each message. */
  async subscribe(subject, onMsg) {
    const nc = await this.conn();
    const sub = nc.subscribe(subject, {
      callback: (err, m) => {
        if (err) return;
        onMsg({
          subject: m.subject,
          data: m.data,
          respond: (obj) => {
            if (m.reply) m.respond(encode(obj));
          },
        });
      },
    });
    await nc.flush();
    return { unsubscribe: () => sub.unsubscribe() };
  }

  /**
   * getResult reads an attempt's durable result; null when there is none.
   * The routers answer it: teamster.get.result
   * (teamster.get.result.gateway.<gatewayId> for a gateway with an
   * identity), body {v: 1, attemptId}; the reply {v, status: "ok", result}
   * carries the result as stored (the data of the attempt's result event),
   * and no result while there is none (not yet, not any more, or no attempt
   * of this tenant's). A rejection, a malformed reply or a result of another
   * attempt throws; no router, a timeout or a refused request throw as
   * request() does.
   */
  async getResult(attemptId) {
    checkId("attemptId", attemptId);
    const subject = getResultSubject(this.cfg.gatewayId);
    const rep = await this.request(subject, { v: VERSION, attemptId }, Math.min(this.cfg.requestTimeoutMs, READ_TIMEOUT_MS));
    const what = `the durable result of ${attemptId} (${subject}) at ${this.natsUrl}`;
    if (rep.status === "rejected") throw rejected(rep, subject, this.natsUrl, `reading ${what}`);
    if (rep.status !== "ok") throw new TeamsterError("internal", `teamster: reading ${what} failed: reply status ${JSON.stringify(rep.status)}, not ok or rejected`);
    if (rep.result === undefined || rep.result === null) return null;
    const r = rep.result;
    if (typeof r !== "object" || Array.isArray(r)) throw new TeamsterError("internal", `teamster: reading ${what} failed: the reply's result is not a JSON object`);
    try {
      validateResult(r);
    } catch (err) {
      throw new TeamsterError("internal", `teamster: reading ${what} failed: ${err?.message ?? err}`);
    }
    if (r.attemptId !== attemptId) {
      throw new TeamsterError("internal", `teamster: reading ${what} failed: the reply carries the result of attempt ${r.attemptId}`);
    }
    return r;
  }

  /** close ends the connection for good (harness dispose, gateway stop). */
  async close() {
    this._closed = true;
    await this.release();
  }

  /**
   * releaseIfIdle ends the connection when no turn is running on it. A
   * one-shot CLI run (agent exec) calls it after its turn: the socket, a
   * registry read in flight and the status iterator would otherwise keep the
   * process alive after OpenClaw is done.
   */
  async releaseIfIdle() {
    if (this.activeTurns === 0) await this.release();
  }

  /** release ends the current connection; the next turn connects again. */
  async release() {
    this._poller?.stop();
    this._poller = null;
    const nc = this._nc;
    this._nc = null;
    if (nc && !nc.isClosed()) {
      try {
        await nc.drain();
      } catch {
        await nc.close().catch(() => {});
      }
    }
  }
}

/**
 * rejected is the error of a router's rejected read: its code (internal
 * unless the fleet's is known) and message, naming the subject and the URL.
 */
function rejected(rep, subject, natsUrl, what = `the request on ${subject} at ${natsUrl}`) {
  const e = TeamsterError.from(rep.error, "no error given");
  return new TeamsterError(e.code, `teamster: the fleet rejected ${what}: ${e.code}: ${e.message}`);
}
