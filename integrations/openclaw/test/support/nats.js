// Real NATS for the unit tests. Every unit test that touches NATS talks to a
// real nats-server on a free loopback port, started for its test file
// (useNatsServer) and stopped after it; the test plays teamster's router and
// worker on the contract's real subjects with the real NATS client
// (FleetPlay), the routers' answers to a gateway's reads (teamster.get.result,
// teamster.get.harnesses) among them. Nothing stands in for NATS.
//
// The server binary: TEAMSTER_NATS_SERVER when it is set (scripts/test.sh
// builds it once per run and sets it), else built here with
// `go build github.com/nats-io/nats-server/v2` from the repository's Go module
// (the version go.mod pins, from the module cache). Go missing, a failed build
// or a server that does not start fail the tests with a message; nothing is
// skipped.

import { spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before } from "node:test";
import { connect, nkeyAuthenticator, nkeys } from "@nats-io/transport-node";
import { Fleet } from "../../src/fleet.js";
import { resolveConfig } from "../../src/config.js";
import { SUBJECT_GET_HARNESSES, SUBJECT_GET_RESULT, VERSION, decode, encode, validId } from "../../src/wire.js";
import { Proc, freePort, repoRoot, tempDir } from "./env.js";

const NATS_SERVER_MODULE = "github.com/nats-io/nats-server/v2";

/** goCommand finds the Go toolchain: PATH first, then Go's default install folder. */
function goCommand() {
  const r = spawnSync("sh", ["-c", "command -v go"], { encoding: "utf8" });
  if (r.status === 0 && r.stdout.trim()) return r.stdout.trim();
  if (existsSync("/usr/local/go/bin/go")) return "/usr/local/go/bin/go";
  return null;
}

let built = null;

/**
 * natsServerBinary returns the path of a nats-server binary: the one
 * TEAMSTER_NATS_SERVER names, else one built (once per process) from the
 * repository's Go module. Throws with what to do when neither works.
 */
export function natsServerBinary() {
  const given = process.env.TEAMSTER_NATS_SERVER;
  if (given) {
    try {
      accessSync(given, constants.X_OK);
    } catch {
      throw new Error(`unit tests need a real nats-server: TEAMSTER_NATS_SERVER=${given} is not an executable file`);
    }
    return given;
  }
  if (built) return built;
  const go = goCommand();
  if (!go) {
    throw new Error(
      "unit tests need a real nats-server, built from the repository's Go module, and Go is not installed: " +
        "install Go 1.26 (on PATH, or in /usr/local/go), or set TEAMSTER_NATS_SERVER to a nats-server binary",
    );
  }
  const dir = tempDir("teamster-unit-nats-bin-");
  const out = join(dir, "nats-server");
  const t0 = Date.now();
  const r = spawnSync(go, ["build", "-o", out, NATS_SERVER_MODULE], { cwd: repoRoot, encoding: "utf8", timeout: 600000 });
  if (r.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `unit tests need a real nats-server: \`go build -o ${out} ${NATS_SERVER_MODULE}\` in ${repoRoot} failed ` +
        `(${r.error?.message ?? `exit ${r.status}`}):\n${r.stderr ?? ""}`,
    );
  }
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  built = out;
  process.stderr.write(`# nats-server built in ${Date.now() - t0} ms\n`);
  return out;
}

/**
 * startNatsServer starts nats-server (JetStream on, as the fleet runs it) on a free loopback port
 * and returns {url, port, stop()}; it throws, with the server's output, when
 * the server does not start. With secure (secureServerConfig's result) the
 * server serves TLS only and admits only its NKey users; the result carries
 * secure (its files, removed by stop) as well.
 */
export async function startNatsServer({ secure } = {}) {
  const bin = natsServerBinary();
  let lastOutput = "";
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const store = tempDir("teamster-unit-nats-");
    let args = ["-js", "-sd", store, "-a", "127.0.0.1", "-p", String(port)];
    if (secure) {
      const conf = join(store, "nats.conf");
      writeFileSync(conf, secure.config({ port, store: join(store, "js") }));
      args = ["-c", conf];
    }
    const p = new Proc(bin, args);
    // A test process that dies without its after hook must not leave the
    // server behind.
    const kill = () => {
      try {
        process.kill(-p.pid, "SIGKILL");
      } catch {}
    };
    process.on("exit", kill);
    const stop = async () => {
      await p.stop("SIGTERM", 5000);
      process.off("exit", kill);
      rmSync(store, { recursive: true, force: true });
    };
    try {
      await p.waitFor(/Server is ready/, 15000, `nats-server on 127.0.0.1:${port}`);
      const stopAll = async () => {
        await stop();
        if (secure) rmSync(secure.dir, { recursive: true, force: true });
      };
      return { url: `${secure ? "tls" : "nats"}://127.0.0.1:${port}`, port, stop: stopAll, secure };
    } catch (err) {
      const exit = p.child.exitCode !== null || p.child.signalCode !== null ? `it exited (${p.child.signalCode ?? `code ${p.child.exitCode}`}) with output:\n${p.out.slice(-4000)}` : err.message;
      lastOutput = exit;
      await stop();
      // Another process took the port between freePort and the bind: try another.
      if (!/address already in use/i.test(p.out)) break;
    }
  }
  throw new Error(`unit tests need a real nats-server and ${bin} did not start: ${lastOutput}`);
}

/**
 * useNatsServer starts a real nats-server before the file's tests and stops
 * it after them. The returned object gets url once the server is up. opts:
 * startNatsServer's.
 */
export function useNatsServer(opts = {}) {
  const server = { url: null, stop: null };
  before(async () => {
    const s = await startNatsServer(typeof opts === "function" ? opts() : opts);
    Object.assign(server, s);
  });
  after(async () => {
    await server.stop?.();
  });
  return server;
}

/**
 * makeTlsFiles writes a CA and a server certificate for 127.0.0.1 and
 * localhost, signed by it, into dir with openssl: {ca, cert, key}.
 */
export function makeTlsFiles(dir) {
  const openssl = spawnSync("sh", ["-c", "command -v openssl"], { encoding: "utf8" });
  if (openssl.status !== 0) throw new Error("unit tests of the TLS connection need openssl on PATH (Debian's openssl package)");
  const f = (n) => join(dir, n);
  const run = (args) => {
    const r = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
    if (r.status !== 0) throw new Error(`openssl ${args.join(" ")} failed: ${r.stderr}`);
  };
  writeFileSync(f("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f("ca-key.pem"), "-out", f("ca.pem"), "-days", "2", "-subj", "/CN=teamster unit test CA"]);
  run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f("server-key.pem"), "-out", f("server.csr"), "-subj", "/CN=127.0.0.1"]);
  run(["x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca-key.pem"), "-CAcreateserial", "-out", f("server.pem"), "-days", "2", "-extfile", f("server.ext")]);
  return { ca: f("ca.pem"), cert: f("server.pem"), key: f("server-key.pem") };
}

/**
 * gatewayPermissions are a gateway's NATS permissions as the fleet ships
 * them (internal/credentials PermissionsOf): a gateway is a tenant, and
 * publishes only the identified form of each request
 * (<subject>.gateway.<gatewayId>, its own submit subject and its reads of
 * results and harnesses among them), never the plain one; it makes no
 * JetStream API call at all ($JS.>, $KV.>, $O.> are denied: NATS checks no
 * permission on a request's reply subject, and JetStream stores its answer
 * wherever a stream captures that subject); it answers the host callbacks it
 * is asked and subscribes only under its inbox and its host id.
 */
export function gatewayPermissions(gatewayId) {
  const id = (s) => `${s}.gateway.${gatewayId}`;
  const requests = [
    "teamster.submit",
    "teamster.inject",
    "teamster.session.*",
    "teamster.source.grant",
    "teamster.source.revoke",
    "teamster.run.*.inject",
    "teamster.run.*.cancel",
    "teamster.run.*.read",
    SUBJECT_GET_RESULT,
    SUBJECT_GET_HARNESSES,
  ];
  return {
    publish: {
      allow: requests.map(id),
      deny: [
        "teamster.submit.delegate.>",
        ...requests,
        "teamster.attempt.>", "teamster.result.>", "teamster.worker.>", "teamster.harness.>",
        "$JS.>", "$KV.>", "$O.>",
      ],
    },
    subscribe: { allow: [`_INBOX.gateway.${gatewayId}.>`, `teamster.host.${gatewayId}.>`] },
    allow_responses: true,
  };
}

/**
 * secureServerConfig prepares a nats-server that serves TLS only (a CA and a
 * certificate made here) and admits NKey users only: "admin" (everything:
 * the test's FleetPlay) and one gateway per id in gateways, with
 * gatewayPermissions. Returns {dir, tls, seedFile(name), config({port,
 * store})}; each user's seed is in seedFile(name). Remove dir after use.
 */
export function secureServerConfig({ gateways = ["g1"] } = {}) {
  const dir = tempDir("teamster-unit-nats-secure-");
  const tls = makeTlsFiles(dir);
  const users = [];
  const seedFile = (name) => join(dir, `${name}.nk`);
  const add = (name, permissions) => {
    const kp = nkeys.createUser();
    writeFileSync(seedFile(name), `${new TextDecoder().decode(kp.getSeed())}\n`, { mode: 0o600 });
    users.push({ nkey: kp.getPublicKey(), ...(permissions ? { permissions } : {}) });
  };
  add("admin");
  for (const g of gateways) add(`gateway-${g}`, gatewayPermissions(g));
  const config = ({ port, store }) =>
    [
      `listen: "127.0.0.1:${port}"`,
      `jetstream { store_dir: ${JSON.stringify(store)} }`,
      `tls { cert_file: ${JSON.stringify(tls.cert)}, key_file: ${JSON.stringify(tls.key)}, timeout: 5 }`,
      `authorization { users: ${JSON.stringify(users, null, 2)} }`,
      "",
    ].join("\n");
  return { dir, tls, seedFile, config };
}

/** adminConnect connects to a secure server as its "admin" user. */
export function adminConnect(server, name = "unit-admin") {
  const seed = new TextEncoder().encode(readFileSync(server.secure.seedFile("admin"), "utf8").trim());
  return connect({ servers: server.url, name, authenticator: nkeyAuthenticator(seed), tls: { caFile: server.secure.tls.ca } });
}

/**
 * pluginFleet is the plugin's own Fleet (the product code) on the test's
 * server, closed after the test. raw: plugin config on top of the defaults
 * (hostId h1 unless raw has a gatewayId). The registry is read every 50 ms
 * unless opts.registryPollMs says otherwise.
 */
export function pluginFleet(t, server, raw = {}, opts = {}) {
  const cfg = resolveConfig({ natsUrl: server.url, ...raw }, {}, { defaultHostId: "h1" });
  const fleet = new Fleet({ cfg, registryPollMs: 50, ...opts });
  t.after(() => fleet.close());
  return fleet;
}

/** flushFleet waits until everything the plugin's connection sent reached the server. */
export async function flushFleet(fleet) {
  await (await fleet.conn()).flush();
}

/** until polls cond until it holds, failing after timeoutMs. */
export async function until(cond, what, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * FleetPlay plays teamster's router and worker on real subjects, over its own
 * connection to the test's nats-server: it serves teamster.submit (queue group
 * "routers") and teamster.run.<id>.cancel / .inject (plain and identified,
 * .gateway.<gatewayId>), publishes events to an attempt's replyTo, calls the
 * gateway's host callbacks, and answers a gateway's reads as the routers do
 * (routerReads): teamster.get.result from the durable results it stores
 * (storeResult), teamster.get.harnesses from the worker entries of its
 * registry (registry()). Every request it receives is kept in requests
 * ({subject, body}), the reads in reads.
 */
export class FleetPlay {
  /** connect opens a FleetPlay on server, closed after the test t. */
  static async connect(t, server) {
    const nc = server.secure ? await adminConnect(server, "unit-fleet-play") : await connect({ servers: server.url, name: "unit-fleet-play" });
    const play = new FleetPlay(nc);
    t.after(() => play.close());
    return play;
  }

  constructor(nc) {
    this.nc = nc;
    this.requests = [];
    this.reads = [];
    this.attempts = [];
    this.subs = [];
    // The routers' view: durable results by tenant ("" without a gateway id)
    // and attempt id, worker entries by worker id.
    this.results = new Map();
    this.workerEntries = new Map();
    // When set ({code, message}), the reads of results or harnesses are
    // rejected with it.
    this.rejectReads = { result: null, harnesses: null };
    this._reading = null;
  }

  /**
   * serve answers requests on subject: handler(body, {subject, respond,
   * play}) returns the reply (sent for it), or calls respond(reply) itself
   * (to publish events after the reply), or returns undefined: no reply.
   * Each request is kept in record (requests unless given).
   */
  async serve(subject, handler, { queue, record = this.requests } = {}) {
    const sub = this.nc.subscribe(subject, {
      queue,
      callback: (err, m) => {
        if (err) return;
        let body;
        try {
          body = decode(m.data);
        } catch {
          return;
        }
        record.push({ subject: m.subject, body });
        let replied = false;
        const respond = (obj) => {
          if (replied || !m.reply) return;
          replied = true;
          m.respond(encode(obj));
        };
        Promise.resolve()
          .then(() => handler(body, { subject: m.subject, respond, play: this }))
          .then((rep) => {
            if (rep !== undefined) respond(rep);
          })
          .catch((e) => respond({ v: VERSION, status: "rejected", error: { code: "internal", message: String(e?.message ?? e) } }));
      },
    });
    this.subs.push(sub);
    await this.nc.flush();
    return sub;
  }

  /**
   * router serves teamster.submit (or opts.subject, such as
   * teamster.submit.gateway.*) in queue group "routers". The default
   * accepts the attempt for harness codex and then, as the worker that
   * claims it, publishes the claimed event to its replyTo.
   */
  router(onSubmit, { subject = "teamster.submit" } = {}) {
    return this.serve(
      subject,
      (body, ctx) => {
        this.attempts.push(body);
        if (onSubmit) return onSubmit(body, ctx);
        ctx.respond({ v: VERSION, status: "accepted", attemptId: body.attemptId, harnessId: "codex", selection: { selectedReason: "auto_plugin" } });
        this.event(body.replyTo, body.attemptId, 1, "claimed", { workerId: "w1", harnessId: "codex", fence: "e:1" });
      },
      { queue: "routers" },
    );
  }

  /** The attempt the router received last. */
  get attempt() {
    return this.attempts.at(-1) ?? null;
  }

  /**
   * worker serves teamster.run.*.cancel and teamster.run.*.inject, in their
   * plain and their identified forms (teamster.run.*.cancel.gateway.*, as a
   * gateway with an identity sends them), with the handlers given; a null
   * handler leaves the subject unserved.
   */
  async worker({ onCancel, onInject } = {}) {
    for (const form of ["", ".gateway.*"]) {
      if (onCancel !== null) await this.serve(`teamster.run.*.cancel${form}`, onCancel ?? (() => ({ v: VERSION, status: "ok" })));
      if (onInject !== null) {
        await this.serve(`teamster.run.*.inject${form}`, onInject ?? (() => ({ v: VERSION, status: "rejected", error: { code: "no_active_run", message: "no run" } })));
      }
    }
  }

  /** requestsOn lists the bodies of the requests received on subject. */
  requestsOn(subject) {
    return this.requests.filter((r) => r.subject === subject).map((r) => r.body);
  }

  /** event publishes one event envelope on an attempt's reply subject. */
  event(replyTo, attemptId, seq, type, data) {
    this.nc.publish(replyTo, encode({ v: VERSION, attemptId, seq, type, data }));
  }

  /** result publishes the attempt's terminal result event. */
  result(attempt, seq, result) {
    this.event(attempt.replyTo, attempt.attemptId, seq, "result", {
      v: VERSION, attemptId: attempt.attemptId, assistantTexts: [], usage: { outputTokens: 0 }, ...result,
    });
  }

  /** hostCall is a worker's host callback to the gateway; resolves with the decoded reply. */
  async hostCall(hostId, attemptId, call, body) {
    const m = await this.nc.request(`teamster.host.${hostId}.${attemptId}.${call}`, encode({ v: VERSION, ...body }), { timeout: 5000 });
    return decode(m.data);
  }

  /**
   * routerReads serves, once per play, teamster.get.result and
   * teamster.get.harnesses in their plain and identified forms
   * (.gateway.<gatewayId>), in queue group "routers", as the fleet's routers
   * answer them: the sender's tenant is the gateway id its subject names
   * (none on the plain subject). A result read answers {v, status: "ok",
   * result} with the result stored for that tenant and attempt, or
   * {v, status: "ok"} without one; a harnesses read answers the manifests of
   * the active and draining workers in the registry. rejectReads.result and
   * rejectReads.harnesses make them rejections instead.
   */
  routerReads() {
    this._reading ??= (async () => {
      const tenantOf = (subject) => {
        const i = subject.lastIndexOf(".gateway.");
        return i < 0 ? "" : subject.slice(i + ".gateway.".length);
      };
      const reject = (error) => ({ v: VERSION, status: "rejected", error });
      const result = (body, { subject }) => {
        if (this.rejectReads.result) return reject(this.rejectReads.result);
        if (!validId(body.attemptId)) return reject({ code: "invalid_request", message: "attemptId is not an id" });
        const r = this.results.get(`${tenantOf(subject)}/${body.attemptId}`);
        return r === undefined ? { v: VERSION, status: "ok" } : { v: VERSION, status: "ok", result: r };
      };
      const harnesses = () => {
        if (this.rejectReads.harnesses) return reject(this.rejectReads.harnesses);
        const live = [...this.workerEntries.values()].filter((e) => e.state === "active" || e.state === "draining");
        return { v: VERSION, status: "ok", harnesses: live.flatMap((e) => e.harnesses ?? []) };
      };
      for (const form of ["", ".gateway.*"]) {
        await this.serve(`${SUBJECT_GET_RESULT}${form}`, result, { queue: "routers", record: this.reads });
        await this.serve(`${SUBJECT_GET_HARNESSES}${form}`, harnesses, { queue: "routers", record: this.reads });
      }
    })();
    return this._reading;
  }

  /** readsOn lists the bodies of the reads received on subject. */
  readsOn(subject) {
    return this.reads.filter((r) => r.subject === subject).map((r) => r.body);
  }

  /**
   * storeResult stores a durable result as the fleet does, for the unnamed
   * tenant or for gateway gatewayId's attempt, and serves the routers' reads
   * of it (routerReads).
   */
  async storeResult(r, gatewayId) {
    this.results.set(`${gatewayId ?? ""}/${r.attemptId}`, JSON.parse(JSON.stringify(r)));
    await this.routerReads();
  }

  /**
   * registry serves the routers' reads (routerReads) and returns the fleet's
   * worker registry as they see it: put(workerId, entry) adds or replaces a
   * worker's entry ({v, workerId, state, harnesses}, an object or its JSON),
   * delete(workerId) removes it.
   */
  async registry() {
    await this.routerReads();
    return {
      put: async (workerId, entry) => {
        this.workerEntries.set(workerId, typeof entry === "string" ? JSON.parse(entry) : entry);
      },
      delete: async (workerId) => {
        this.workerEntries.delete(workerId);
      },
    };
  }

  async flush() {
    await this.nc.flush();
  }

  /**
   * close stops serving, then closes the connection. The unsubscriptions
   * are flushed first: once close returns, the server routes nothing to
   * this play any more (a closed connection alone is removed from the
   * server's interest asynchronously).
   */
  async close() {
    if (this.nc.isClosed()) return;
    for (const sub of this.subs.splice(0)) sub.unsubscribe();
    await this.nc.flush();
    await this.nc.close();
  }
}
