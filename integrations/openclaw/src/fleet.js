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
      this.registry.reset();
      if (err) this.log.warn?.(`teamster: fleet connection closed: ${err.message}`);
    });
    this._watchRegistry(nc);
    return nc;
  }

  /** Watches KV TEAMSTER_WORKERS into the registry cache; best effort. */
  _watchRegistry(nc) {
    (async () => {
      try {
        const kv = await new Kvm(nc).open(BUCKET_WORKERS);
        const it = await kv.watch();
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
        this.registry.reset();
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
  async request(subject, body, timeoutMs = this.cfg.requestTimeoutMs) {
    const nc = await this.conn();
    if (this._disconnected) {
      throw new TeamsterError("internal", `teamster: the fleet at ${this.natsUrl} is unreachable (disconnected; reconnecting)`, "none");
    }
    let msg;
    try {
      msg = await nc.request(subject, encode(body), { timeout: timeoutMs });
    } catch (err) {
      if (err instanceof NoRespondersError || err?.cause instanceof NoRespondersError || /no responders/i.test(err?.message ?? "")) {
        throw new TeamsterError("internal", `teamster: nobody is serving ${subject} at ${this.natsUrl}`, "none");
      }
      if (err instanceof TimeoutError || err?.cause instanceof TimeoutError || /timeout/i.test(err?.message ?? "")) {
        throw new TeamsterError("internal", `teamster: no reply on ${subject} from ${this.natsUrl} within ${timeoutMs} ms`);
      }
      throw new TeamsterError("internal", `teamster: request on ${subject} at ${this.natsUrl} failed: ${err?.message ?? err}`);
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
   * release ends the current connection; the next turn connects again. A
   * one-shot CLI run (agent exec) releases after its turn so that the open
   * socket does not keep the process alive.
   */
  async release() {
    try {
      this._watcher?.stop();
    } catch {}
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
