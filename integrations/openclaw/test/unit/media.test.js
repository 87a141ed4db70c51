// Reply attachments from the worker's workspace: the attempt asks for them
// when OpenClaw offers prepareReplyMedia, and the reader reads files through
// teamster.run.<attemptId>.read (played here by FleetPlay, over a real
// nats-server) in chunks, turning refusals into OpenClaw's media errors.

import assert from "node:assert/strict";
import { test } from "node:test";
import { buildAttempt } from "../../src/attempt.js";
import { resolveConfig } from "../../src/config.js";
import { CHUNK, WorkspaceReader } from "../../src/workspace.js";
import { FleetPlay, pluginFleet, useNatsServer } from "../support/nats.js";
import { params } from "../support/params.js";

const nats = useNatsServer();

test("an attempt stages reply media only when OpenClaw offers it, for a turn with a workspace and a host", () => {
  const cfg = resolveConfig({ hostId: "h1", routes: { fleet: { provider: "openai", compatibleIds: ["codex"] } } });
  const offered = params({ workspaceDir: "/ws", hostCapabilities: { prepareReplyMedia: async () => ({}) } });
  assert.equal(buildAttempt(offered, cfg, { attemptId: "01A", hostId: "h1" }).stageReplyMedia, true);
  assert.equal(buildAttempt(offered, cfg, { attemptId: "01A" }).stageReplyMedia, undefined, "no host, nobody to call back");
  assert.equal(buildAttempt(params({ workspaceDir: "/ws" }), cfg, { attemptId: "01A", hostId: "h1" }).stageReplyMedia, undefined);
  assert.equal(buildAttempt(params({ hostCapabilities: { prepareReplyMedia: async () => ({}) } }), cfg, { attemptId: "01A", hostId: "h1" }).stageReplyMedia, undefined);
});

class FakeLocalMediaAccessError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

test("the reader reads a file in chunks and maps refusals to OpenClaw's media errors", async (t) => {
  const play = await FleetPlay.connect(t, nats);
  const files = { "out/big.bin": Buffer.alloc(CHUNK + 1000, 7), "a.txt": Buffer.from("hello") };
  await play.serve("teamster.run.*.read", (body) => {
    if (body.token !== "tok") return { v: 1, status: "rejected", reason: "denied", error: { code: "invalid_request", message: "not this run's token" } };
    if (body.path === "leak") return { v: 1, status: "rejected", reason: "denied", error: { code: "invalid_request", message: "path escapes from parent" } };
    const f = files[body.path];
    if (!f) return { v: 1, status: "rejected", reason: "not_found", error: { code: "invalid_request", message: "no such file" } };
    const data = f.subarray(body.offset ?? 0, (body.offset ?? 0) + body.length);
    return { v: 1, status: "ok", data: data.toString("base64"), size: f.length, eof: (body.offset ?? 0) + data.length >= f.length };
  });
  const fleet = pluginFleet(t, nats, { hostId: "h1" });
  const r = new WorkspaceReader({ fleet, attemptId: "01A", token: "tok", LocalMediaAccessError: FakeLocalMediaAccessError });
  assert.deepEqual(await r.read("./out/big.bin", { maxBytes: 1 << 20 }), files["out/big.bin"]);
  assert.equal((await r.read("a.txt", { maxBytes: 100 })).toString(), "hello");
  const reads = play.requestsOn("teamster.run.01A.read");
  assert.deepEqual(reads.slice(0, 2).map((b) => [b.path, b.offset, b.length]), [["out/big.bin", 0, CHUNK], ["out/big.bin", CHUNK, CHUNK]]);
  await assert.rejects(r.read("missing.txt", { maxBytes: 100 }), (e) => e instanceof FakeLocalMediaAccessError && e.code === "not-found");
  await assert.rejects(r.read("leak", { maxBytes: 100 }), (e) => e instanceof FakeLocalMediaAccessError && e.code === "path-not-allowed");
  await assert.rejects(r.read("out/big.bin", { maxBytes: 1000 }), /Media exceeds 1000 bytes limit/);
  assert.equal(r.files, 2);
  const other = new WorkspaceReader({ fleet, attemptId: "01A", token: "stolen", LocalMediaAccessError: FakeLocalMediaAccessError });
  await assert.rejects(other.read("a.txt", { maxBytes: 100 }), (e) => e.code === "path-not-allowed");
  const aborted = AbortSignal.abort();
  await assert.rejects(r.read("a.txt", { maxBytes: 100, signal: aborted }), (e) => e.name === "AbortError");
});
