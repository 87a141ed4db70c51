// Active-run injection: the handle this plugin installs while a fleet turn
// runs, so that steering reaches the fleet (teamster.run.<attemptId>.inject,
// for a gateway teamster.run.<attemptId>.inject.gateway.<gatewayId>).
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
//
// Source-bound input carries OpenClaw's own assertion to the fleet: the
// request names a host assertion (hostAssertion), and the worker asks for it
// on teamster.host.<hostId>.<attemptId>.assertCurrent right before its
// harness dispatches the item and before every retry; hostAssert answers
// from OpenClaw's closure. OpenClaw's assertCurrent throws (a
// MessageInjectionAuthorityError) once the sender's authority is gone: that
// error, not a fleet code, is what the item then fails with, so that
// OpenClaw drops the input instead of running it as a later turn.

import { randomUUID } from "node:crypto";
import { TeamsterError, VERSION, runInjectSubject } from "./wire.js";

const SETTLED = new Set(["committed", "cancelled", "rejected"]);

/** isImage: OpenClaw's ImageContent, {type: "image", data (base64), mimeType}. */
function isImage(img) {
  return img?.type === "image" && typeof img.data === "string" && img.data !== "" && typeof img.mimeType === "string" && img.mimeType !== "";
}

export class Injector {
  /**
   * fleet: request(subject, body, timeoutMs?, {beforeSend}) and cfg
   * (its gatewayId names the identified inject subject); attemptId;
   * onAbort(reason): aborts the run; log: the plugin's logger; questions:
   * {sessionKey, claim, cancel}, OpenClaw's pending-question helpers
   * (claimPendingAgentQuestionAnswer, cancelPendingAgentQuestionForSession).
   */
  constructor({ fleet, attemptId, onAbort, log, questions }) {
    this.fleet = fleet;
    this.log = log ?? {};
    this.questions = questions ?? {};
    this.attemptId = attemptId;
    this.onAbort = onAbort;
    this.running = true;
    this.claimed = false; // a worker runs the attempt (its inject subject is served)
    this.aborted = false;
    this.items = new Map(); // injectionId -> {settle(state, code)}
    this.early = new Map(); // injectionId -> data of events seen before the reply
    this.unknown = new Set(); // settle functions of items whose admission is uncertain
    this.assertions = new Map(); // hostAssertion -> {assertCurrent, revoked}
  }

  /**
   * hostAssert answers the worker's assertCurrent callback: true while the
   * item's OpenClaw assertion holds. An unknown id (the item settled, the run
   * ended) is false, and once false an assertion stays false.
   */
  hostAssert(id) {
    const a = this.assertions.get(id);
    if (!a || a.revoked) return false;
    try {
      if (a.assertCurrent() !== false) return true;
      a.revoked = new TeamsterError("source_revoked", "teamster: the steering input's authority is no longer current");
    } catch (err) {
      a.revoked = err;
    }
    const why = a.revoked?.cause?.message ?? a.revoked?.message ?? String(a.revoked);
    this.log.info?.(`teamster: attempt ${this.attemptId} steering assertion ${id} no longer holds (${why}); the fleet drops the item`);
    return false;
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
    this.assertions.clear();
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
    if (authorityKind !== "run" && authorityKind !== "source-bound") {
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", `teamster: unknown steering authority ${JSON.stringify(authorityKind)}`);
    }
    if (authorityKind === "source-bound" && typeof assertCurrent !== "function") {
      // Never relabelled as run input: without OpenClaw's assertion there is
      // nothing the fleet could check.
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: source-bound steering without an assertion");
    }
    if (typeof text !== "string" || !text) {
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: steering input must be non-empty text");
    }
    // A plain-text message from the user while the fleet's harness waits
    // for an answer (a userInput callback OpenClaw is asking) is that answer,
    // as in OpenClaw's own runtime: it is claimed, not steered.
    if (options?.isInboundUserMessage === true && (options.images?.length ?? 0) === 0 && (options.media?.length ?? 0) === 0 &&
      (await this.claimAnswer(text, options, assertCurrent, authorityKind))) {
      options.onQueueAccepted?.(true);
      try {
        options.onQueueSettled?.();
      } catch {}
      return undefined;
    }
    const images = options?.images ?? [];
    if (!Array.isArray(images) || !images.every(isImage)) {
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: steering images are {type: \"image\", data: base64, mimeType}");
    }
    if ((options?.media?.length ?? 0) > 0) {
      // Attachments OpenClaw keeps as files (too large to be inline images,
      // or not images): the fleet's inject carries inline images only, so
      // OpenClaw runs such input as the next turn.
      options?.onQueueAccepted?.(false);
      throw new TeamsterError("invalid_request", "teamster: steering carries inline images only, not file attachments");
    }
    const body = { v: VERSION, attemptId: this.attemptId, text, authorityKind };
    // Within the envelope's 1 MiB: a larger request fails to encode
    // (payload_too_large) before anything is sent.
    if (images.length > 0) body.images = images.map(({ type, data, mimeType }) => ({ type, data, mimeType }));
    if (Number.isInteger(options?.debounceMs) && options.debounceMs >= 0 && options.debounceMs <= 60000) body.debounceMs = options.debounceMs;
    let assertion;
    if (authorityKind === "source-bound") {
      assertion = { id: `oc-${randomUUID()}`, assertCurrent, revoked: undefined };
      body.hostAssertion = assertion.id;
      this.assertions.set(assertion.id, assertion);
    }
    const forget = () => assertion && this.assertions.delete(assertion.id);
    // failure is what an item the fleet refused or dropped fails with: the
    // authority error OpenClaw's assertion threw, when the fleet asked for it
    // and it no longer held (OpenClaw then drops the input), else the fleet's.
    const failure = (err) => assertion?.revoked ?? err;
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
      rep = await this.fleet.request(runInjectSubject(this.attemptId, this.fleet.cfg?.gatewayId), body, undefined, { beforeSend: check });
    } catch (err) {
      if (err?.uncertain === true) return this.uncertain(options, err, forget);
      forget();
      options?.onQueueAccepted?.(false);
      throw err;
    }
    if (rep.status !== "accepted") {
      forget();
      options?.onQueueAccepted?.(false);
      throw failure(TeamsterError.from(rep.error, "the fleet refused the injection"));
    }
    options?.onQueueAccepted?.(true);
    const id = rep.injectionId;
    if (assertion) this.log.info?.(`teamster: attempt ${this.attemptId} took steering ${id} as source-bound input under OpenClaw's assertion ${assertion.id}`);
    let settle;
    const settled = new Promise((resolve) => {
      let done = false;
      settle = (state, code) => {
        if (done) return;
        done = true;
        this.items.delete(id);
        forget();
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
    throw failure(new TeamsterError(code || "cancelled", `teamster: the steering input was ${state} by the fleet${code ? ` (${code})` : ""}`));
  }

  /**
   * claimAnswer offers text as the answer to the session's pending question
   * (OpenClaw's claimPendingAgentQuestionAnswer, under the input's own
   * authority): true when it was taken. Without the helper, or without a
   * question pending, it is false.
   */
  async claimAnswer(text, options, assertCurrent, authorityKind) {
    const { claim, sessionKey } = this.questions;
    if (typeof claim !== "function" || !sessionKey) return false;
    return (
      (await claim({
        sessionKey, text, sourceRecorder: options?.userTurnTranscriptRecorder,
        ...(typeof assertCurrent === "function" ? { authority: { kind: authorityKind, assertCurrent } } : {}),
      })) === true
    );
  }

  /** cancelQuestion cancels the session's pending question (OpenClaw's cancelPendingUserInput). */
  async cancelQuestion(resolvedBy, assertCurrent, authorityKind) {
    const { cancel, sessionKey } = this.questions;
    if (typeof cancel !== "function" || !sessionKey) return false;
    return (
      (await cancel({
        sessionKey, resolvedBy,
        ...(typeof assertCurrent === "function" ? { authority: { kind: authorityKind, assertCurrent } } : {}),
      })) === true
    );
  }

  /**
   * uncertain: the inject request got no reply, so the fleet may hold the
   * item. It is reported unconfirmed (never replayed) and settled when the
   * run ends, the last moment its fate can change.
   */
  uncertain(options, err, forget) {
    options?.onQueueAccepted?.(true);
    let done = false;
    const settle = () => {
      if (done) return;
      done = true;
      this.unknown.delete(settle);
      forget();
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
      // Inline images travel with the input (InjectRequest.images), up to
      // the envelope's 1 MiB.
      supportsQueueMessageImages: true,
      // queue() honours waitForTranscriptCommit: it resolves once the fleet's
      // harness took the input.
      supportsTranscriptCommitWait: true,
      messageInjectionV2: {
        version: 2,
        isAvailable: () => self.available,
        queueMessage: (text, options, assertCurrent, authorityKind) => self.queue(text, options, assertCurrent, authorityKind),
        // A question the fleet's harness is asking (userInput), answered or
        // cancelled under the input's own assertion.
        claimPendingUserInputAnswer: (text, options, assertCurrent, authorityKind) => self.claimAnswer(text, options, assertCurrent, authorityKind),
        cancelPendingUserInput: (resolvedBy, assertCurrent, authorityKind) => self.cancelQuestion(resolvedBy, assertCurrent, authorityKind),
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
