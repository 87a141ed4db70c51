// Active-run injection: the handle this plugin installs with OpenClaw's
// setActiveEmbeddedRun while a fleet turn runs, so that steering reaches the
// fleet (teamster.run.<attemptId>.inject). It is a V2 sink: it calls the
// host's assertCurrent immediately before dispatch, and settles every item
// once (onQueueSettled) when the fleet reports the item's settlement.

import { TeamsterError, VERSION, runInjectSubject } from "./wire.js";

const SETTLED = new Set(["committed", "cancelled", "rejected"]);

export class Injector {
  /**
   * fleet: request(subject, body); attemptId; onAbort(reason): aborts the run.
   */
  constructor({ fleet, attemptId, onAbort }) {
    this.fleet = fleet;
    this.attemptId = attemptId;
    this.onAbort = onAbort;
    this.running = true;
    this.aborted = false;
    this.items = new Map(); // injectionId -> {settle(state, code)}
    this.early = new Map(); // injectionId -> data of events seen before the reply
  }

  /** onEvent receives the attempt's injection events. */
  onEvent(data) {
    const id = data?.injectionId;
    if (typeof id !== "string") return;
    if (!SETTLED.has(data.state)) return;
    const item = this.items.get(id);
    if (item) item.settle(data.state, data.code);
    else this.early.set(id, data);
  }

  /** end settles what the fleet never settled (the run is over). */
  end() {
    this.running = false;
    for (const item of this.items.values()) item.settle("cancelled");
  }

  /**
   * queue dispatches one item. assertCurrent (V2) is called immediately before
   * the request; a false assertion rejects the item before any I/O.
   */
  async queue(text, options, assertCurrent, authorityKind) {
    if (!this.running) throw new TeamsterError("no_active_run", "teamster: the fleet turn has ended");
    if (authorityKind === "source-bound") {
      // The fleet's source-bound authority needs a source id and generation
      // that OpenClaw does not expose; never relabel such input as "run".
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("injection_requires_v2", "teamster: source-bound steering cannot be carried to the fleet by this plugin");
    }
    const body = { v: VERSION, attemptId: this.attemptId, text, authorityKind: "run" };
    if (Number.isInteger(options?.debounceMs) && options.debounceMs >= 0 && options.debounceMs <= 60000) body.debounceMs = options.debounceMs;
    if (assertCurrent) {
      try {
        assertCurrent();
      } catch (err) {
        options?.onQueueAccepted?.(false);
        throw err;
      }
    }
    let rep;
    try {
      rep = await this.fleet.request(runInjectSubject(this.attemptId), body);
    } catch (err) {
      options?.onQueueAccepted?.(false);
      throw err;
    }
    if (rep.status !== "accepted") {
      options?.onQueueAccepted?.(false);
      throw TeamsterError.from(rep.error, "the fleet refused the injection");
    }
    options?.onQueueAccepted?.(true);
    const id = rep.injectionId;
    let settle;
    const settled = new Promise((resolve) => {
      let done = false;
      settle = (state, code) => {
        if (done) return;
        done = true;
        this.items.delete(id);
        try {
          options?.onQueueSettled?.();
        } catch {}
        resolve({ state, code });
      };
    });
    this.items.set(id, { settle });
    const early = this.early.get(id);
    if (early) {
      this.early.delete(id);
      settle(early.state, early.code);
    }
    if (!this.running) settle("cancelled");
    if (options?.waitForTranscriptCommit === false) return;
    const { state, code } = await settled;
    if (state !== "committed") {
      throw new TeamsterError(code || "cancelled", `teamster: the steering input was ${state} by the fleet${code ? ` (${code})` : ""}`);
    }
  }

  /**
   * handle is the EmbeddedAgentQueueHandle OpenClaw's setActiveEmbeddedRun
   * takes: a V2 messageInjection plus run state and abort.
   */
  handle({ runId, startedAtMs, toolAuthorityFingerprint }) {
    const self = this;
    return {
      kind: "embedded",
      runId,
      startedAtMs,
      // OpenClaw binds the handle to the attempt's exact tool authority.
      ...(toolAuthorityFingerprint ? { toolAuthorityFingerprint } : {}),
      supportsQueueMessageImages: false,
      messageInjectionV2: {
        version: 2,
        isAvailable: () => self.running,
        queueMessage: (text, options, assertCurrent, authorityKind) => self.queue(text, options, assertCurrent, authorityKind),
      },
      // Legacy callers without V2 reach the same path as ordinary input.
      queueMessage: (text, options) => self.queue(text, options, undefined, "run"),
      isStreaming: () => self.running,
      isStopped: () => !self.running,
      isAborted: () => self.aborted,
      isAbortable: () => self.running,
      isCompacting: () => false,
      cancel: (reason) => self.abort(reason ?? "user_abort"),
      abort: (reason) => self.abort(reason ?? "user_abort"),
    };
  }

  abort(reason) {
    if (this.aborted) return;
    this.aborted = true;
    this.onAbort?.(reason);
  }
}
