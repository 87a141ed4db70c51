// Active-run injection: the handle this plugin installs while a fleet turn
// runs, so that steering reaches the fleet (teamster.run.<attemptId>.inject).
//
// How OpenClaw 2026.9.6 finds it (read from its dist; see README, "Steering"):
// a message steered into a running gateway turn (chat.send with queueMode
// "steer", a channel message in steer mode, /steer) goes to the reply
// operation of the session key: the handle must be attached to the attempt's
// params.replyOperation (attachBackend) and, for the embedded-run registry,
// installed with setActiveEmbeddedRun. OpenClaw then calls
// messageInjectionV2.queueMessage(text, options, assertCurrent, authorityKind).
//
// It is a V2 sink: assertCurrent is called after every await and
// synchronously before the inject request is published; each item's
// onQueueSettled fires once, from the fleet's injection events.

import { TeamsterError, VERSION, runInjectSubject } from "./wire.js";

const SETTLED = new Set(["committed", "cancelled", "rejected"]);

export class Injector {
  /**
   * fleet: request(subject, body, timeoutMs?, {beforeSend}); attemptId;
   * onAbort(reason): aborts the run.
   */
  constructor({ fleet, attemptId, onAbort }) {
    this.fleet = fleet;
    this.attemptId = attemptId;
    this.onAbort = onAbort;
    this.running = true;
    this.claimed = false; // a worker runs the attempt (its inject subject is served)
    this.aborted = false;
    this.items = new Map(); // injectionId -> {settle(state, code)}
    this.early = new Map(); // injectionId -> data of events seen before the reply
    this.unknown = new Set(); // settle functions of items whose admission is uncertain
  }

  /** available: steering can be carried to the fleet right now. */
  get available() {
    return this.running && this.claimed && !this.aborted;
  }

  /** markClaimed: the fleet reported the claim; the run serves injection. */
  markClaimed() {
    this.claimed = true;
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

  /**
   * end: the run is over. The worker settles its items before the result, so
   * an item still open here has an unknown fate (its event was lost).
   */
  end() {
    this.running = false;
    for (const item of [...this.items.values()]) item.settle("unknown");
    for (const settle of [...this.unknown]) settle();
  }

  /**
   * queue dispatches one item: the handle's live-run check and the host's
   * assertCurrent run synchronously right before the request is published; a
   * false assertion rejects the item before any I/O.
   *
   * Outcomes: resolves once the fleet accepted the item (and, when OpenClaw
   * asks to wait for the commit, once the harness took it); throws when the
   * item was certainly not delivered (OpenClaw may then run it as a later
   * turn); returns {transcriptCommit: "unconfirmed"} when delivery is
   * uncertain (no reply to the request, or the run ended without settling
   * the item), so that OpenClaw never replays it.
   */
  async queue(text, options, assertCurrent, authorityKind) {
    if (authorityKind === "source-bound") {
      // The fleet's source-bound authority needs a source id and generation
      // that OpenClaw does not expose; never relabel such input as "run".
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("injection_requires_v2", "teamster: source-bound steering cannot be carried to the fleet by this plugin (OpenClaw exposes no source identity the fleet could check)");
    }
    if (typeof text !== "string" || !text) {
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: steering input must be non-empty text");
    }
    if ((options?.images?.length ?? 0) > 0) {
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: steering carries text only");
    }
    const body = { v: VERSION, attemptId: this.attemptId, text, authorityKind: "run" };
    if (Number.isInteger(options?.debounceMs) && options.debounceMs >= 0 && options.debounceMs <= 60000) body.debounceMs = options.debounceMs;
    const check = () => {
      if (!this.available) {
        throw new TeamsterError("no_active_run", this.running && !this.claimed
          ? "teamster: the fleet has not started the turn yet"
          : "teamster: the fleet turn has ended");
      }
      if (assertCurrent && assertCurrent() === false) {
        throw new TeamsterError("cancelled", "teamster: the steering input's authority is no longer current");
      }
    };
    let rep;
    try {
      check();
      rep = await this.fleet.request(runInjectSubject(this.attemptId), body, undefined, { beforeSend: check });
    } catch (err) {
      if (err?.uncertain === true) return this.uncertain(options, err);
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
    if (typeof id === "string") this.items.set(id, { settle });
    const early = typeof id === "string" ? this.early.get(id) : undefined;
    if (early) {
      this.early.delete(id);
      settle(early.state, early.code);
    }
    if (!this.running || typeof id !== "string") settle("unknown");
    if (options?.waitForTranscriptCommit !== true) return undefined;
    const { state, code } = await settled;
    if (state === "committed") return undefined;
    if (state === "unknown") {
      return { transcriptCommit: "unconfirmed", errorMessage: "teamster: the fleet turn ended without reporting whether it took the steering input" };
    }
    throw new TeamsterError(code || "cancelled", `teamster: the steering input was ${state} by the fleet${code ? ` (${code})` : ""}`);
  }

  /**
   * uncertain: the inject request got no reply, so the fleet may hold the
   * item. It is reported unconfirmed (never replayed) and settled when the
   * run ends, the last moment its fate can change.
   */
  uncertain(options, err) {
    options?.onQueueAccepted?.(true);
    let done = false;
    const settle = () => {
      if (done) return;
      done = true;
      this.unknown.delete(settle);
      try {
        options?.onQueueSettled?.();
      } catch {}
    };
    this.unknown.add(settle);
    if (!this.running) settle();
    return { transcriptCommit: "unconfirmed", errorMessage: err?.message ?? String(err) };
  }

  /**
   * handle is the EmbeddedAgentQueueHandle OpenClaw's setActiveEmbeddedRun
   * and ReplyOperation.attachBackend take. ids: the attempt's runId,
   * startedAtMs and toolAuthorityFingerprint (OpenClaw binds the handle to
   * that exact authority and refuses steering from a sender with another),
   * and the reply-delivery facts OpenClaw compares with each steered input
   * (terminalReplyExpectation, sourceReplyDeliveryMode,
   * taskSuggestionDeliveryMode).
   */
  handle(ids) {
    const self = this;
    const h = {
      kind: "embedded",
      runId: ids.runId,
      startedAtMs: ids.startedAtMs,
      supportsQueueMessageImages: false,
      // queue() honours waitForTranscriptCommit: it resolves once the fleet's
      // harness took the input.
      supportsTranscriptCommitWait: true,
      messageInjectionV2: {
        version: 2,
        isAvailable: () => self.available,
        queueMessage: (text, options, assertCurrent, authorityKind) => self.queue(text, options, assertCurrent, authorityKind),
      },
      // The handle type requires queueMessage; OpenClaw prefers the V2
      // capability above whenever it is present. Without an assertion this
      // is ordinary run input.
      queueMessage: (text, options) => self.queue(text, options, undefined, "run"),
      isStreaming: () => self.running && !self.aborted,
      isStopped: () => !self.running || self.aborted,
      isAborted: () => self.aborted,
      isAbortable: () => self.running && !self.aborted,
      isCompacting: () => false,
      cancel: (reason) => self.abort(reason ?? "user_abort"),
      abort: (reason) => self.abort(reason ?? "user_abort"),
    };
    for (const k of ["toolAuthorityFingerprint", "terminalReplyExpectation", "sourceReplyDeliveryMode", "taskSuggestionDeliveryMode"]) {
      if (ids[k] !== undefined) h[k] = ids[k];
    }
    return h;
  }

  abort(reason) {
    if (this.aborted) return;
    this.aborted = true;
    this.onAbort?.(reason);
  }
}
