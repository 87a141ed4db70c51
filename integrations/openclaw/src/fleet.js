// Fleet: the plugin's one NATS connection to a teamster fleet, shared by every
// turn of this OpenClaw process. It connects lazily (the first turn, or the
// gateway service start), keeps a cached copy of the registry (KV
// TEAMSTER_WORKERS, read every REGISTRY_POLL_MS) for supports(), and fails
// closed with the NATS URL in every error when the fleet cannot be reached.
//
// What it asks of NATS stays within a gateway's shipped permissions: every
// reply subject under the configured inbox prefix (the connection's
// inboxPrefix: request replies, JetStream API replies and the attempts'
// replyTo), and JetStream read-only: stream info and direct gets of the
// registry's stream, the durable result by stream message get. It creates no
// stream and no consumer (only the fleet's routers do).

import { readFileSync } from "node:fs";
import {
  connect as natsConnect, credsAuthenticator, nkeyAuthenticator, NoRespondersError, PermissionViolationError, TimeoutError, createInbox,
} from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { BUCKET_WORKERS, STREAM_RESULTS, TeamsterError, decode, encode, resultSubject, validateResult } from "./wire.js";
import { Registry } from "./registry.js";

/**
 * How often the registry is read: the workers' heartbeat period
 * (bus.HeartbeatInterval), so a worker's new state shows within one beat.
 */
export const REGISTRY_POLL_MS = 2000;

/** KV TEAMSTER_WORKERS as JetStream stores it: its stream and its keys' subject prefix. */
export const REGISTRY_STREAM = `KV_${BUCKET_WORKERS}`;
export const REGISTRY_SUBJECT_PREFIX = `$KV.${BUCKET_WORKERS}.`;

/** How many direct gets of registry keys one poll has in flight at most. */
const REGISTRY_GET_CONCURRENCY = 16;

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
  // Every reply subject this connection asks for (request muxing, JetStream
  // API replies, createInbox in newInbox) starts with it.
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
   * _pollRegistry reads KV TEAMSTER_WORKERS into the registry cache every
   * registryPollMs while nc is the connection; best effort. A gateway may not
   * create the consumer a KV watch needs, so it reads: the stream's info
   * with a subjects filter lists the keys, a direct get per key reads its
   * last revision. A failed read leaves the registry unknown until a read
   * succeeds.
   */
  _pollRegistry(nc) {
    const current = () => this._nc === nc && !nc.isClosed();
    const seqs = new Map(); // key -> stream sequence of the revision in the cache
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
          const jsm = await jetstreamManager(nc, { checkAPI: false, timeout: Math.min(this.cfg.requestTimeoutMs, 5000) });
          await this._readRegistry(jsm, seqs, () => stopped || !current());
          if (!stopped && current()) this.registry.markKnown();
          lastError = "";
        } catch (err) {
          const msg = err?.message ?? String(err);
          if (msg !== lastError) this.log.debug?.(`teamster: reading the fleet's registry (KV ${BUCKET_WORKERS}) at ${this.natsUrl} failed: ${msg}`);
          lastError = msg;
          if (current() || this._nc === null) this.registry.reset();
          seqs.clear();
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
   * _readRegistry reads the registry once: $JS.API.STREAM.INFO.KV_TEAMSTER_WORKERS
   * with subjects_filter "$KV.TEAMSTER_WORKERS.>" lists the keys that have a
   * message, then $JS.API.DIRECT.GET.KV_TEAMSTER_WORKERS.$KV.TEAMSTER_WORKERS.<key>
   * reads each key's last message. Delete and purge markers (header
   * KV-Operation DEL or PURGE) and keys gone from the stream (the bucket's
   * TTL expired them) leave the cache. A key is put into the cache only
   * when its revision changed, so that an entry ages by the time its last
   * heartbeat was seen, as the registry's TTL check expects.
   */
  async _readRegistry(jsm, seqs, cancelled) {
    const si = await jsm.streams.info(REGISTRY_STREAM, { subjects_filter: `${REGISTRY_SUBJECT_PREFIX}>` });
    const subjects = Object.keys(si?.state?.subjects ?? {}).filter((s) => s.startsWith(REGISTRY_SUBJECT_PREFIX));
    const live = new Set();
    let next = 0;
    const worker = async () => {
      while (next < subjects.length) {
        const subject = subjects[next++];
        const m = await jsm.direct.getMessage(REGISTRY_STREAM, { last_by_subj: subject });
        if (!m) continue; // expired since the info
        const op = m.header?.get("KV-Operation") ?? "";
        if (op === "DEL" || op === "PURGE") continue;
        const key = subject.slice(REGISTRY_SUBJECT_PREFIX.length);
        live.add(key);
        if (cancelled()) return;
        if (seqs.get(key) !== m.seq || !this.registry.entries.has(key)) {
          seqs.set(key, m.seq);
          this.registry.put(key, m.data);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(REGISTRY_GET_CONCURRENCY, subjects.length) }, worker));
    if (cancelled()) return;
    for (const key of [...this.registry.entries.keys()]) if (!live.has(key)) this.registry.delete(key);
    for (const key of [...seqs.keys()]) if (!live.has(key)) seqs.delete(key);
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
