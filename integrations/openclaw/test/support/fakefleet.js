// FakeFleet stands in for the NATS connection in unit tests: it records
// requests and lets a test play the router and the worker. (The fleet and e2e
// tests run the real fleet.)

import { TeamsterError, VERSION, encode } from "../../src/wire.js";

export class FakeFleet {
  constructor({ onRequest, natsUrl = "nats://fake:4222" } = {}) {
    this.natsUrl = natsUrl;
    this.requests = [];
    this.subs = new Map();
    this.onRequest = onRequest ?? (() => ({ v: VERSION, status: "ok" }));
    this.durable = new Map();
    this.inbox = 0;
    this.connectError = null;
    this.registry = null;
  }

  async conn() {
    if (this.connectError) throw this.connectError;
    return {};
  }

  registrySnapshot() {
    return this.registry;
  }

  newInbox() {
    return `_INBOX.fake.${++this.inbox}`;
  }

  async subscribe(subject, cb) {
    this.subs.set(subject, cb);
    return { unsubscribe: () => this.subs.delete(subject) };
  }

  async request(subject, body) {
    this.requests.push({ subject, body });
    const rep = await this.onRequest(subject, body, this);
    if (rep instanceof Error) throw rep;
    return rep;
  }

  async getResult(attemptId) {
    return this.durable.get(attemptId) ?? null;
  }

  async close() {}

  /** event publishes an event on the attempt's reply subject. */
  event(replyTo, attemptId, seq, type, data) {
    const cb = this.subs.get(replyTo);
    if (cb) cb({ subject: replyTo, data: encode({ v: VERSION, attemptId, seq, type, data }) });
  }

  /** hostCall plays a worker's host callback; resolves with the reply. */
  hostCall(hostId, attemptId, call, body) {
    const pattern = `teamster.host.${hostId}.${attemptId}.>`;
    const cb = this.subs.get(pattern);
    if (!cb) throw new TeamsterError("internal", `nobody subscribed ${pattern}`);
    return new Promise((resolve) => {
      cb({ subject: `teamster.host.${hostId}.${attemptId}.${call}`, data: encode({ v: VERSION, ...body }), respond: resolve });
    });
  }
}

/** params is a minimal OpenClaw attempt params object. */
export function params(extra = {}) {
  return {
    runId: "run-1",
    sessionId: "sess-1",
    sessionKey: "agent:main:unit",
    agentId: "main",
    provider: "fleet",
    modelId: "echo",
    model: { api: "openai-completions" },
    prompt: "hello",
    timeoutMs: 60000,
    agentHarnessId: "teamster",
    agentHarnessRuntimeOverride: "teamster",
    modelSelectionLocked: false,
    ...extra,
  };
}
