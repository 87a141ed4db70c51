// Fleet: the plugin's one NATS connection to a teamster fleet, shared by every
// turn of this OpenClaw process. It connects lazily (the first turn, or the
// gateway service start), keeps a cached copy of the registry (KV
// TEAMSTER_WORKERS) for supports(), and fails closed with the NATS URL in
// every error when the fleet cannot be reached.

import { readFileSync } from "node:fs";
import { connect as natsConnect, credsAuthenticator, NoRespondersError, TimeoutError, createInbox } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { BUCKET_WORKERS, STREAM_RESULTS, TeamsterError, decode, encode, resultSubject, validateResult } from "./wire.js";
import { Registry } from "./registry.js";

/** Options a NATS connect call gets from the plugin config. */
export function connectOptions(cfg, readFile = readFileSync) {
  const o = {
    servers: cfg.natsUrl,
    name: `openclaw-teamster-${cfg.hostId}`,
    timeout: cfg.connectTimeoutMs,
    reconnect: true,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
  };
  if (cfg.credsFile) o.authenticator = credsAuthenticator(readFile(cfg.credsFile));
  if (cfg.token) o.token = cfg.token;
  if (cfg.user) {
    o.user = cfg.user;
    o.pass = cfg.password;
  }
  return o;
}

export class Fleet {
  /**
   * params: {cfg, logger?, connect? (tests), now?}
   */
  constructor({ cfg, logger, connect = natsConnect, now = Date.now }) {
    this.cfg = cfg;
    this.log = logger ?? { info() {}, warn() {}, debug() {} };
    this._connect = connect;
    this.registry = new Registry({ now });
    this._nc = null;
    this._connecting = null;
    this._closed = false;
    this._watcher = null;
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
    (async () => {
      for await (const s of nc.status()) {
        if (s.type === "disconnect") {
          this._disconnected = true;
          this.log.warn?.(`teamster: disconnected from the fleet at ${this.natsUrl}`);
        } else if (s.type === "reconnect") {
          this._disconnected = false;
        }
      }
    })().catch(() => {});
    nc.closed().then((err) => {
      if (this._nc === nc) this._nc = null;
      if (this._nc === null) this.registry.reset();
      if (err) this.log.warn?.(`teamster: fleet connection closed: ${err.message}`);
    });
    this._watchRegistry(nc);
    return nc;
  }

  /** Watches KV TEAMSTER_WORKERS into the registry cache; best effort. */
  _watchRegistry(nc) {
    const current = () => this._nc === nc && !nc.isClosed();
    (async () => {
      let it;
      try {
        const kv = await new Kvm(nc).open(BUCKET_WORKERS);
        it = await kv.watch();
        if (!current()) {
          it.stop();
          return;
        }
        this._watcher = it;
        // The initial values end with a null-delta marker in the JS client;
        // mark the cache known as soon as the watch is running.
        this.registry.markKnown();
        for await (const e of it) {
          if (e.operation === "PUT") this.registry.put(e.key, e.value);
          else this.registry.delete(e.key);
        }
      } catch (err) {
        this.log.debug?.(`teamster: registry watch ended: ${err?.message ?? err}`);
      } finally {
        if (this._watcher === it) this._watcher = null;
        if (this._nc === nc || this._nc === null) this.registry.reset();
      }
    })();
  }

  /** Starts connecting in the background (gateway start); never throws. */
  warmUp() {
    this.conn().catch((err) => this.log.warn?.(err.message));
  }

  newInbox() {
    return createInbox();
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

  /** getResult reads an attempt's durable result; null when there is none. */
  async getResult(attemptId) {
    const nc = await this.conn();
    const jsm = await jetstreamManager(nc, { checkAPI: false });
    let sm;
    try {
      sm = await jsm.streams.getMessage(STREAM_RESULTS, { last_by_subj: resultSubject(attemptId) });
    } catch (err) {
      if (/not found/i.test(err?.message ?? "") || err?.code === 404 || err?.api_error?.err_code === 10037) return null;
      throw err;
    }
    if (!sm) return null;
    return validateResult(decode(sm.data));
  }

  /** close ends the connection for good (harness dispose, gateway stop). */
  async close() {
    this._closed = true;
    await this.release();
  }

  /**
   * releaseIfIdle ends the connection when no turn is running on it. A
   * one-shot CLI run (agent exec) calls it after its turn: the socket, the
   * registry watcher and the status iterator would otherwise keep the
   * process alive after OpenClaw is done.
   */
  async releaseIfIdle() {
    if (this.activeTurns === 0) await this.release();
  }

  /** release ends the current connection; the next turn connects again. */
  async release() {
    try {
      this._watcher?.stop();
    } catch {}
    this._watcher = null;
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
