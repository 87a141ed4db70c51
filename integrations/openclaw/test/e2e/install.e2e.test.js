// The README's install, step by step, with the real OpenClaw (pinned in
// .tools/, Node.js 24) in an OpenClaw home of its own: a copy of the plugin
// folder as an operator has it (no node_modules), `npm ci` there, `openclaw
// plugins install -l <folder>`, the README's plugin configuration through
// `openclaw config patch`, what `openclaw plugins list` and `plugins inspect
// --runtime` then report, and `openclaw plugins uninstall`.
//
// Isolation: OpenClaw reads its config from OPENCLAW_CONFIG_PATH and keeps its
// state (plugin install records, in <state>/state/openclaw.sqlite) in
// OPENCLAW_STATE_DIR; HOME is this test's folder as well, so the machine's
// ~/.openclaw is neither read nor written. No gateway runs: the CLI saves each
// change for the next gateway start, as it does on a host whose gateway is
// stopped. The fleet-backed test (openclaw.e2e.test.js) runs turns through a
// plugin installed the same way.
//
// Prerequisites (scripts/deps.sh installs them; the test fails, never skips,
// when one is missing): .tools/node24, .tools/openclaw, npm on PATH.

import assert from "node:assert/strict";
import { cpSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, afterEach, before, test } from "node:test";
import {
  Proc, installPlugin, node24, openclawEntry, openclawEnv, pluginDir, readJson, requireCommand, requireFile, tempDir,
} from "../support/env.js";

const ID = "teamster";
let work, plugin, cfgPath, env, listed, inspected;
let failed = true; // until the set-up completed

/** oc starts one OpenClaw CLI command in the test's OpenClaw home. */
function oc(args) {
  return new Proc(node24, [openclawEntry, ...args], { env, cwd: work });
}

function out(r) {
  return `exit ${r.code}${r.signal ? ` (${r.signal})` : ""}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;
}

/**
 * The README's configuration block (the json5 code block that starts with
 * the comment `// teamster.json5`), so that what the README tells operators
 * to apply is what this test applies.
 */
function readmeConfig() {
  const readme = readFileSync(join(pluginDir, "README.md"), "utf8");
  const m = readme.match(/```json5\n(\/\/ teamster\.json5\n[\s\S]*?)```/);
  assert.ok(m, "README.md has a json5 block starting with `// teamster.json5`");
  return m[1];
}

before(() => {
  requireFile(node24, "run integrations/openclaw/scripts/deps.sh (installs Node.js 24 into .tools/node24)");
  requireFile(openclawEntry, "run integrations/openclaw/scripts/deps.sh (installs the pinned openclaw into .tools/openclaw)");
  requireCommand("npm", "install npm (Debian's npm package, or Node.js from nodejs.org)");
  work = tempDir("teamster-oc-install-");
  // The plugin folder as an operator gets it: what the package ships
  // (package.json "files") plus the lock file, without node_modules.
  plugin = join(work, "teamster-plugin");
  const pkg = readJson(join(pluginDir, "package.json"));
  for (const f of ["package.json", "package-lock.json", ...pkg.files]) {
    cpSync(join(pluginDir, f), join(plugin, f), { recursive: true });
  }
  cfgPath = join(work, "openclaw.json");
  env = openclawEnv({ HOME: work, OPENCLAW_STATE_DIR: join(work, "state"), OPENCLAW_CONFIG_PATH: cfgPath });
  failed = false;
});

afterEach((t) => {
  if (t.passed === false) failed = true;
});

after(async () => {
  await Promise.all([listed, inspected].filter(Boolean).map((p) => p.stop("SIGKILL", 0)));
  // Keep the folder (config, state, the plugin copy) of a failed run, or on request.
  if (work && !failed && !process.env.TEAMSTER_KEEP_E2E) rmSync(work, { recursive: true, force: true });
  else if (work) console.log(`# kept ${work}`);
});

test("package.json declares OpenClaw as an optional peer matching the plugin API floor, and is publishable", () => {
  const pkg = readJson(join(plugin, "package.json"));
  assert.equal(pkg.private, undefined);
  assert.deepEqual(pkg.peerDependencies, { openclaw: pkg.openclaw.compat.pluginApi });
  assert.equal(pkg.openclaw.compat.pluginApi, ">=2026.9.6");
  assert.deepEqual(pkg.peerDependenciesMeta, { openclaw: { optional: true } });
  const lock = readJson(join(plugin, "package-lock.json"));
  assert.deepEqual(lock.packages[""].peerDependencies, pkg.peerDependencies, "package-lock.json is in step with package.json");
  assert.equal(lock.packages["node_modules/openclaw"], undefined, "the lock file does not pull OpenClaw in");
});

test("npm ci in the plugin folder installs the lock file's NATS client and not OpenClaw", async () => {
  const r = await new Proc("npm", ["ci", "--no-audit", "--no-fund", "--prefer-offline"], { cwd: plugin, env: { ...process.env, NO_COLOR: "1" } }).done(300000);
  assert.equal(r.code, 0, `npm ci failed: ${out(r)}`);
  for (const dep of Object.keys(readJson(join(plugin, "package.json")).dependencies)) {
    assert.ok(existsSync(join(plugin, "node_modules", dep, "package.json")), `${dep} installed`);
  }
  assert.equal(existsSync(join(plugin, "node_modules/openclaw")), false, "npm ci installed no copy of openclaw");
  // Exactly the lock file's packages (npm's record of what it installed).
  const want = Object.keys(readJson(join(plugin, "package-lock.json")).packages).filter(Boolean).sort();
  const got = Object.keys(readJson(join(plugin, "node_modules/.package-lock.json")).packages).sort();
  assert.deepEqual(got, want);
});

test("openclaw plugins install -l links the folder and enables the plugin", async () => {
  const r = await installPlugin(plugin, env, { cwd: work });
  assert.equal(r.code, 0, `install failed: ${out(r)}`);
  // OpenClaw prints the path with the home folder as "~".
  const linked = (r.stdout + r.stderr).match(/Linked plugin path: (\S+)/)?.[1];
  assert.equal(linked?.replace(/^~(?=\/)/, work), plugin, out(r));
  const cfg = readJson(cfgPath);
  assert.deepEqual(cfg.plugins?.load?.paths, [plugin], "the link is a plugins.load.paths entry written by OpenClaw");
  assert.equal(cfg.plugins?.entries?.[ID]?.enabled, true);
});

test("the README's configuration applies with openclaw config patch", async () => {
  const file = join(work, "teamster.json5");
  writeFileSync(file, readmeConfig());
  const r = await oc(["config", "patch", "--file", file]).done(240000);
  assert.equal(r.code, 0, `config patch failed: ${out(r)}`);
  const cfg = readJson(cfgPath);
  const pc = cfg.plugins.entries[ID].config;
  assert.equal(typeof pc.natsUrl, "string");
  assert.ok(pc.routes && Object.keys(pc.routes).length > 0, "routes configured");
  assert.equal(cfg.plugins.entries[ID].enabled, true, "the patch left the plugin enabled");
  assert.deepEqual(cfg.plugins.load.paths, [plugin], "the patch left the link in place");
  const providers = Object.values(cfg.models?.providers ?? {});
  assert.ok(providers.some((p) => p.agentRuntime?.id === ID), "a provider runs on the teamster harness");
  // Both read-only checks start now and run side by side.
  listed = oc(["plugins", "list", "--json"]);
  inspected = oc(["plugins", "inspect", ID, "--runtime", "--json"]);
});

test("openclaw plugins list shows the linked plugin enabled, loaded, its dependencies resolved in its folder", async () => {
  const r = await listed.done(240000);
  assert.equal(r.code, 0, `plugins list failed: ${out(r)}`);
  assert.ok(r.json, `plugins list --json printed JSON: ${out(r)}`);
  const p = r.json.plugins.find((x) => x.id === ID);
  assert.ok(p, `teamster listed: ${r.json.plugins.map((x) => x.id).join(", ")}`);
  assert.equal(p.enabled, true);
  assert.equal(p.status, "loaded");
  assert.equal(p.format, "openclaw");
  assert.equal(p.rootDir, plugin);
  assert.equal(p.source, join(plugin, "src/index.js"));
  assert.equal(p.trust?.installSource, "path");
  assert.equal(p.dependencyStatus?.requiredInstalled, true, JSON.stringify(p.dependencyStatus));
  assert.deepEqual(p.dependencyStatus.missing, []);
  for (const d of p.dependencyStatus.dependencies) {
    assert.equal(d.resolvedPath, join(plugin, "node_modules", d.name), `${d.name} resolves in the plugin's own node_modules`);
  }
});

test("openclaw plugins inspect --runtime imports the plugin: it registers the teamster harness and its fleet service", async () => {
  const r = await inspected.done(300000);
  assert.equal(r.code, 0, `plugins inspect failed: ${out(r)}`);
  assert.ok(r.json, `plugins inspect --json printed JSON: ${out(r)}`);
  const p = r.json.plugin;
  assert.equal(p.imported, true, "OpenClaw imported src/index.js (its openclaw/plugin-sdk and @nats-io imports resolved)");
  assert.equal(p.status, "loaded");
  assert.deepEqual(p.agentHarnessIds, [ID]);
  assert.ok(p.services.includes("teamster-fleet"), JSON.stringify(p.services));
  assert.equal(p.builtWithOpenClawVersion, "2026.9.6");
  assert.deepEqual(r.json.capabilities, [{ kind: "agent-harness", ids: [ID] }]);
  assert.deepEqual((r.json.diagnostics ?? []).filter((d) => d.level === "error"), [], JSON.stringify(r.json.diagnostics));
  assert.equal(r.json.install?.source, "path");
  assert.equal(r.json.install?.sourcePath, plugin);
  assert.equal(r.json.install?.installPath, plugin, "linked: loaded from the folder, not copied");
});

test("openclaw plugins uninstall removes the link and the plugin's settings and keeps the folder", async () => {
  const r = await oc(["plugins", "uninstall", ID, "--force"]).done(240000);
  assert.equal(r.code, 0, `uninstall failed: ${out(r)}`);
  assert.match(r.stdout + r.stderr, /Uninstalled plugin "teamster"/);
  const cfg = readJson(cfgPath);
  assert.ok(!(cfg.plugins?.load?.paths ?? []).includes(plugin), "the load path is gone");
  assert.deepEqual(cfg.plugins.entries[ID], { enabled: false }, "only OpenClaw's uninstall marker is left, the config is gone");
  assert.ok(existsSync(join(plugin, "openclaw.plugin.json")) && existsSync(join(plugin, "node_modules")), "the linked folder is untouched");
  const l = await oc(["plugins", "list", "--json"]).done(240000);
  assert.equal(l.code, 0, `plugins list failed: ${out(l)}`);
  assert.equal(l.json.plugins.find((x) => x.id === ID), undefined, "teamster is no longer listed");
});
