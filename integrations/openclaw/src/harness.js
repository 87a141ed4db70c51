// The OpenClaw agent harness that runs each turn on a teamster fleet.
//
// One runAttempt: connect (fail closed, naming the NATS URL) → subscribe the
// reply subject and the host-callback subjects → submit the prepared attempt
// → install the active-run handle (V2 injection) → stream events into
// OpenClaw → wait for the one terminal result (the event, or the durable
// result) → mirror the reply into OpenClaw's transcript → map the result.
// An abort in OpenClaw cancels the attempt on the fleet.

import { AsyncLocalStorage } from "node:async_hooks";
import { buildAttempt, describeTools } from "./attempt.js";
import { HostCallbacks } from "./host.js";
import { WorkspaceReader } from "./workspace.js";
import { Injector } from "./injection.js";
import { failureResult, mapResult, replyText, assistantMessage } from "./result.js";
import { decideSupport } from "./support.js";
import {
  SUBJECT_SUBMIT,
  TeamsterError,
  VERSION,
  decode,
  hostCallOf,
  hostSubjects,
  newAttemptId,
  runCancelSubject,
  sessionOpSubject,
  submitDelegateSubject,
  submitGatewaySubject,
  validateResult,
} from "./wire.js";

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    }, { once: true });
  });

/**
 * submitSubject is where this plugin submits: its delegate's
 * (teamster.submit.delegate.<pluginId>, and for a delegate bound to a
 * gateway teamster.submit.delegate.<pluginId>.gateway.<gatewayId>), its
 * gateway's own subject (teamster.submit.gateway.<gatewayId>), or the shared
 * owner subject.
 */
export function submitSubject(cfg) {
  if (cfg.delegatePluginId) return submitDelegateSubject(cfg.delegatePluginId, cfg.gatewayId);
  if (cfg.gatewayId) return submitGatewaySubject(cfg.gatewayId);
  return SUBJECT_SUBMIT;
}

/**
 * createTeamsterHarness builds the harness object registerAgentHarness takes.
 * deps: {cfg, fleet, runtime, logger, onDispose?}; runtime holds OpenClaw's
 * SDK helpers (setActiveEmbeddedRun, clearActiveEmbeddedRun,
 * appendTranscriptMessage), any of which may be absent (tests); onDispose
 * replaces closing the fleet when the connection is shared.
 */
export function createTeamsterHarness({ cfg, fleet, runtime = {}, logger, onDispose }) {
  const log = logger ?? { info() {}, warn() {}, debug() {} };
  return {
    id: cfg.harnessId,
    label: "teamster fleet",
    pluginId: "teamster",
    supports(ctx) {
      return decideSupport(cfg, ctx, fleet.registrySnapshot());
    },
    runAttempt(params) {
      return new Turn({ cfg, fleet, runtime, log, params }).run();
    },
    reset(params) {
      return resetSession({ cfg, fleet, log, params });
    },
    /**
     * finalizeSettledTurn: OpenClaw's turn ended with its tool calls settled
     * and no visible answer; one restricted, tool-less follow-up on the
     * session's native thread, as a fleet operation (under the session's
     * lease, in its order), answers it. A harness on the fleet that cannot
     * enforce the restrictions refuses it (harness_unsupported_route), and
     * this throws: OpenClaw then falls back to its own notice.
     */
    async finalizeSettledTurn({ attempt }) {
      const out = await new Turn({ cfg, fleet, runtime, log, params: attempt, operation: OPERATION_FINALIZE }).run();
      if (out.terminal?.kind !== "ok") {
        throw out.terminal?.error ?? out.terminal?.failure?.error ?? new TeamsterError("internal", "teamster: the fleet's finalization did not end ok");
      }
      return { assistant: out.lastAssistant };
    },
    async dispose() {
      await (onDispose ? onDispose() : fleet.close());
    },
  };
}

// sessionBusyRetryMs bounds how long a reset waits for the session's turn on
// the fleet to end (session_busy while it holds the session's lease).
const sessionBusyRetryMs = 15000;

/**
 * resetSession is the harness's reset(params): OpenClaw resets (or deletes) a
 * session, and the fleet's record of it follows, so that the next turn
 * starts a new native thread: teamster.session.reset clears the native
 * binding, the stored native state and the model-selection lock
 * (teamster.session.delete, for a deleted session, removes the record);
 * a gateway sends it on the identified subject,
 * teamster.session.<op>.gateway.<gatewayId>. It
 * is the owner's operation: a plugin configured as a delegate has none, and
 * does nothing. OpenClaw calls every harness's reset, so a session that
 * never ran on the fleet is answered ok (noRecord). A turn still running on
 * the fleet holds the session (session_busy): the reset is retried while it
 * ends, for up to 15 s. A failure throws; OpenClaw logs it.
 */
export async function resetSession({ cfg, fleet, log, params }) {
  const sessionKey = params?.sessionKey;
  if (typeof sessionKey !== "string" || !sessionKey) return;
  if (cfg.delegatePluginId) {
    log.debug?.(`teamster: session ${sessionKey} ${params.reason ?? "reset"}: a delegate does not reset fleet sessions`);
    return;
  }
  const op = params.reason === "deleted" ? "delete" : "reset";
  const until = Date.now() + sessionBusyRetryMs;
  for (let wait = 100; ; wait = Math.min(wait * 2, 2000)) {
    const rep = await fleet.request(sessionOpSubject(op, cfg.gatewayId), { v: VERSION, sessionKey });
    if (rep.status === "ok") {
      log.info?.(`teamster: session ${sessionKey} ${op} on the fleet (${params.reason ?? "unknown"})${rep.noRecord ? ": it had no fleet record" : ""}`);
      return;
    }
    const err = TeamsterError.from(rep.error, `the fleet refused the session ${op}`);
    if (err.code !== "session_busy" || Date.now() + wait > until) {
      throw new TeamsterError(err.code, `teamster: the fleet at ${fleet.natsUrl} refused to ${op} session ${sessionKey}: ${err.message}`);
    }
    await new Promise((r) => setTimeout(r, wait));
  }
}

/** OPERATION_FINALIZE is the fleet operation of finalizeSettledTurn. */
export const OPERATION_FINALIZE = "settled-tool-finalization";

/** Turn is one runAttempt (or, with operation, one fleet operation). */
export class Turn {
  constructor({ cfg, fleet, runtime, log, params, attemptId = newAttemptId(), operation }) {
    this.cfg = cfg;
    this.operation = operation;
    this.fleet = fleet;
    this.runtime = runtime;
    this.log = log;
    this.params = params;
    this.attemptId = attemptId;
    this.ctx = { harnessId: cfg.harnessId, api: params.model?.api, toolMetas: [], externalAbort: false };
    this.subs = [];
    this.seq = 0;
    this.partial = "";
    this.lastUsage = 0;
    this.result = null;
    this.resultWaiters = [];
    this.ended = new AbortController();
    this.abortReason = null;
    this.abortWaiters = [];
  }

  /**
   * run is runAttempt: the turn on the fleet, then OpenClaw's agent-end side
   * effects (its agent_end hook), which a plugin harness fires itself, once
   * per turn, whatever its outcome. A one-shot CLI run waits for them (its
   * process exits after the turn); a gateway turn does not.
   */
  async run() {
    const started = Date.now();
    const out = await this.runTurn();
    // A finalization is part of the turn it finalizes: no agent_end of its own.
    if (!this.operation) await this.agentEnd(out, Date.now() - started);
    return out;
  }

  async agentEnd(out, durationMs) {
    const p = this.params;
    const fire = p.oneShotCliRun === true ? this.runtime.awaitAgentEndSideEffects : this.runtime.runAgentEndSideEffects;
    if (typeof fire !== "function") return;
    const ok = out.terminal?.kind === "ok";
    const error = ok ? undefined : (out.terminal?.error ?? out.terminal?.failure?.error)?.message;
    try {
      await fire({
        event: { runId: p.runId, messages: out.messagesSnapshot ?? [], success: ok, error, durationMs },
        ctx: {
          runId: p.runId, agentId: p.agentId, sessionKey: p.sessionKey, sessionId: p.sessionId, workspaceDir: p.workspaceDir,
          modelProviderId: p.provider, modelId: p.modelId, messageProvider: p.messageProvider, trigger: p.trigger, config: p.config,
        },
      });
    } catch (err) {
      this.log.warn?.(`teamster: attempt ${this.attemptId}: OpenClaw's agent_end side effects failed: ${err?.message ?? err}`);
    }
  }

  async runTurn() {
    const p = this.params;
    // OpenClaw keeps a turn's caller authority in async context
    // (AsyncLocalStorage): its tools and its question path check it. Host
    // callbacks arrive on the shared NATS connection, whose callbacks carry
    // whatever context the connection was made in (another turn's, long
    // over), so each one runs in this attempt's context, captured here,
    // inside runAttempt.
    const inAttempt = AsyncLocalStorage.snapshot();
    if (p.abortSignal?.aborted) {
      return failureResult(p, new TeamsterError("cancelled", "teamster: the turn was aborted before it was submitted", "none"), { ...this.ctx, externalAbort: true });
    }
    let handle;
    this.fleet.turnStarted?.();
    try {
      await this.fleet.conn();
      const replyTo = this.fleet.newInbox();
      this.subs.push(await this.fleet.subscribe(replyTo, (m) => this.onEvent(m.data)));
      const host = new HostCallbacks({
        params: p,
        tools: () => this.toolSurface(),
        toolsAllow: p.disableTools === true ? [] : p.toolsAllow,
        signal: this.ended.signal,
        onToolMeta: (meta) => this.ctx.toolMetas.push(meta),
        hostAssert: (id) => this.injector?.hostAssert(id) ?? false,
        // OpenClaw's tool-result middleware (plugins' registerAgentToolResultMiddleware)
        // transforms each tool result before the fleet's harness gets it, as it
        // does for OpenClaw's own runtime.
        middleware: this.runtime.createAgentToolResultMiddlewareRunner?.({
          runtime: "openclaw", agentId: p.agentId, sessionId: p.sessionId, sessionKey: p.sessionKey, runId: p.runId,
        }),
        askUser: this.runtime.runAgentHarnessGatewayQuestion,
        log: this.log,
        attemptId: this.attemptId,
        replyMedia: (body) => this.stageReplyMedia(body),
      });
      this.subs.push(
        await this.fleet.subscribe(hostSubjects(this.cfg.hostId, this.attemptId), async (m) => {
          m.respond(await inAttempt(() => host.handle(hostCallOf(m.subject), m.data)));
        }),
      );
      const tools = this.cfg.advertiseTools && p.disableTools !== true ? describeTools(await this.toolSurface()) : [];
      const attempt = buildAttempt(p, this.cfg, { attemptId: this.attemptId, replyTo, hostId: this.cfg.hostId, tools, operation: this.operation });
      this.injector = new Injector({
        fleet: this.fleet, attemptId: this.attemptId, onAbort: (r) => this.abort(r), log: this.log,
        questions: {
          sessionKey: p.sessionKey,
          claim: this.runtime.claimPendingAgentQuestionAnswer,
          cancel: this.runtime.cancelPendingAgentQuestionForSession,
        },
      });
      const onAbort = () => this.abort("user_abort");
      p.abortSignal?.addEventListener("abort", onAbort, { once: true });
      this.ended.signal.addEventListener("abort", () => p.abortSignal?.removeEventListener("abort", onAbort), { once: true });

      const subject = submitSubject(this.cfg);
      const reply = await this.fleet.request(subject, attempt);
      if (reply.status === "fallback") {
        throw new TeamsterError(
          "harness_unsupported_route",
          `teamster: the fleet at ${this.fleet.natsUrl} selected OpenClaw's embedded runtime for ${attempt.provider}/${attempt.modelId} (${reply.selection?.selectedReason ?? "fallback"}); this plugin never runs a turn elsewhere`,
          "none",
        );
      }
      if (reply.status !== "accepted") {
        const err = TeamsterError.from(reply.error, "the fleet rejected the attempt");
        throw new TeamsterError(err.code, `teamster: the fleet at ${this.fleet.natsUrl} rejected the turn: ${err.code}: ${err.message}`, "none");
      }
      this.emitAgent("teamster", { phase: "accepted", attemptId: this.attemptId, harnessId: reply.harnessId, selection: reply.selection?.selectedReason });
      this.log.info?.(`teamster: attempt ${this.attemptId} accepted for ${reply.harnessId} (session ${p.sessionKey})`);

      // A finalization takes no steering: it is not the session's active run.
      if (!this.operation) handle = this.installHandle();
      if (p.abortSignal?.aborted) this.abort("user_abort");

      const r = await this.waitResult(attempt);
      this.log.info?.(`teamster: attempt ${this.attemptId} ended ${r.status}${r.error ? ` ${r.error.code}` : ""} (session ${p.sessionKey})`);
      const out = mapResult(p, r, this.ctx);
      if (r.status === "ok" && this.preparedReplyMedia) out.preparedReplyMedia = this.preparedReplyMedia;
      // OpenClaw writes a finalization's answer itself.
      if (r.status === "ok" && !this.operation) await this.mirror(out, r);
      return out;
    } catch (err) {
      const e = err instanceof TeamsterError ? err : new TeamsterError("internal", `teamster: the fleet at ${this.fleet.natsUrl}: ${err?.message ?? err}`);
      this.log.warn?.(`teamster: turn failed before a fleet result: ${e.message}`);
      return failureResult(p, e, this.ctx);
    } finally {
      this.injector?.end();
      this.ended.abort();
      if (handle) this.uninstallHandle(handle);
      for (const s of this.subs) {
        try {
          s.unsubscribe();
        } catch {}
      }
      this.fleet.turnEnded?.();
      // A one-shot CLI run (openclaw agent exec) exits after this turn: end
      // the connection so that nothing of the plugin keeps the process alive.
      // A gateway keeps its connection for the next turn.
      if (p.oneShotCliRun === true) await this.fleet.releaseIfIdle?.().catch(() => {});
    }
  }

  /**
   * stageReplyMedia answers the worker's replyMedia callback: the harness
   * returned, its reply's MEDIA: lines may name files of the worker's
   * workspace, and the worker serves reads of it until this returns.
   * OpenClaw's prepareReplyMedia applies the channel's policy and limits
   * and reads each file through readWorkspaceFile; what it prepared goes
   * on the turn's result (preparedReplyMedia).
   */
  async stageReplyMedia(body) {
    const p = this.params;
    const prepare = p.hostCapabilities?.prepareReplyMedia;
    if (typeof prepare !== "function") return;
    const texts = Array.isArray(body.assistantTexts) ? body.assistantTexts.filter((t) => typeof t === "string") : [];
    const attempt = mapResult(p, { status: "ok", attemptId: this.attemptId, assistantTexts: texts }, this.ctx);
    const reader = new WorkspaceReader({ fleet: this.fleet, attemptId: this.attemptId, token: body.token, LocalMediaAccessError: this.runtime.LocalMediaAccessError });
    const r = await prepare({
      kind: "attempt", attempt, signal: this.ended.signal,
      ...(typeof body.workspaceRoot === "string" && body.workspaceRoot ? { workspaceRoot: body.workspaceRoot } : {}),
      readWorkspaceFile: (relativePath, options) => reader.read(relativePath, options),
    });
    if (r?.kind === "attempt" && Array.isArray(r.preparedMedia)) {
      this.preparedReplyMedia = r.preparedMedia;
      this.log.info?.(`teamster: attempt ${this.attemptId} staged ${r.preparedMedia.length} reply attachment(s) from the worker's workspace (${reader.files} read)`);
    }
  }

  /**
   * installHandle makes the running fleet turn OpenClaw's active run of the
   * session, so that steering reaches it: attached to the reply operation
   * (gateway turns: chat.send, channels, /steer look the session's active run
   * up there) and registered with setActiveEmbeddedRun (OpenClaw's embedded
   * run registry, with the attempt's exact ids). Both calls run inside
   * runAttempt's async context, where OpenClaw checks the registration
   * against the attempt (session id/key/file, agent, runId, tool authority).
   */
  installHandle() {
    const p = this.params;
    const op = p.replyOperation;
    const canRegister = typeof this.runtime.setActiveEmbeddedRun === "function" && p.sessionId;
    if (!canRegister && typeof op?.attachBackend !== "function") return undefined;
    const handle = this.injector.handle({
      runId: p.runId,
      startedAtMs: p.startedAtMs ?? Date.now(),
      toolAuthorityFingerprint: p.toolAuthorityFingerprint,
      terminalReplyExpectation: p.terminalReplyExpectation,
      sourceReplyDeliveryMode: p.sourceReplyDeliveryMode,
      taskSuggestionDeliveryMode: p.taskSuggestionDeliveryMode,
    });
    let attached = false;
    try {
      if (typeof op?.attachBackend === "function") {
        op.attachBackend(handle);
        attached = true;
      }
      if (canRegister) this.runtime.setActiveEmbeddedRun(p.sessionId, handle, p.sessionKey, p.sessionFile, p.agentId);
      this.log.debug?.(`teamster: attempt ${this.attemptId} is the active run of session ${p.sessionKey}${attached ? " (reply operation attached)" : ""}`);
      return handle;
    } catch (err) {
      this.log.warn?.(`teamster: could not install the active-run handle of attempt ${this.attemptId}; steering is unavailable for this turn: ${err?.message ?? err}`);
      if (attached) {
        try {
          op.detachBackend?.(handle);
        } catch {}
      }
      return undefined;
    }
  }

  uninstallHandle(handle) {
    const p = this.params;
    try {
      p.replyOperation?.detachBackend?.(handle);
    } catch {}
    if (this.runtime.clearActiveEmbeddedRun && p.sessionId) {
      try {
        this.runtime.clearActiveEmbeddedRun(p.sessionId, handle, p.sessionKey, p.sessionFile, "teamster-turn-ended");
      } catch {}
    }
  }

  /** OpenClaw's tool surface for this turn, created once, lazily. */
  toolSurface() {
    if (!this._tools) {
      this._tools = (async () => {
        const caps = this.params.hostCapabilities;
        if (typeof caps?.createToolSurface !== "function") return [];
        const p = this.params;
        try {
          return caps.createToolSurface({
            agentId: p.agentId,
            sessionKey: p.sessionKey,
            workspaceDir: p.workspaceDir,
            agentDir: p.agentDir,
            sandbox: p.sandbox,
            abortSignal: this.ended.signal,
            modelProvider: p.provider,
            modelId: p.modelId,
            modelApi: p.model?.api,
            trigger: p.trigger,
          }, p.cwd ? { cwd: p.cwd } : undefined) ?? [];
        } catch (err) {
          this.log.warn?.(`teamster: OpenClaw's tool surface is unavailable for this turn: ${err?.message ?? err}`);
          return [];
        }
      })();
    }
    return this._tools;
  }

  emitAgent(stream, data) {
    try {
      const r = this.params.onAgentEvent?.({ stream, data, sessionKey: this.params.sessionKey });
      if (r && typeof r.catch === "function") r.catch(() => {});
    } catch {}
  }

  /** onEvent handles one event on the reply subject. */
  onEvent(bytes) {
    let e;
    try {
      e = decode(bytes);
    } catch {
      return;
    }
    if (e.attemptId !== this.attemptId || this.result) return;
    if (typeof e.seq === "number" && e.seq <= this.seq && e.type !== "result") return;
    if (typeof e.seq === "number") this.seq = Math.max(this.seq, e.seq);
    const d = e.data ?? {};
    const p = this.params;
    try {
      p.replyOperation?.recordActivity?.();
    } catch {}
    try {
      switch (e.type) {
        case "claimed":
          this.injector?.markClaimed();
          this.emitAgent("teamster", { phase: "claimed", attemptId: this.attemptId, workerId: d.workerId, harnessId: d.harnessId, fence: d.fence });
          this.log.info?.(`teamster: attempt ${this.attemptId} claimed by ${d.workerId} (session ${p.sessionKey}, fence ${d.fence})`);
          break;
        case "partial":
          if (typeof d.text === "string") {
            this.partial = this.partial ? `${this.partial}\n\n${d.text}` : d.text;
            const r = p.onPartialReply?.({ text: this.partial, delta: d.text });
            if (r && typeof r.catch === "function") r.catch(() => {});
            this.emitAgent("assistant", { text: this.partial, delta: d.text });
          }
          break;
        case "agent":
          if (d.kind === "reasoning") {
            const r = p.onReasoningStream?.({ text: d.text, isReasoning: true });
            if (r && typeof r.catch === "function") r.catch(() => {});
            this.emitAgent("thinking", { text: d.text });
          } else {
            this.emitAgent(d.kind === "plan" ? "plan" : "item", { kind: d.kind, text: d.text });
          }
          break;
        case "tool":
          this.emitAgent("tool", { phase: "result", name: d.name, toolCallId: d.callId, args: d.args, isError: d.outcome === "failure" });
          break;
        case "usage": {
          const total = Number(d.outputTokens);
          if (Number.isFinite(total) && total > this.lastUsage) {
            const delta = total - this.lastUsage;
            this.lastUsage = total;
            try {
              p.hostCapabilities?.reportOutputTokens?.(delta);
            } catch {}
          }
          break;
        }
        case "injection":
          this.injector?.onEvent(d);
          this.emitAgent("teamster", { phase: "injection", injectionId: d.injectionId, state: d.state, code: d.code });
          break;
        case "result":
          this.setResult(validateResult({ ...d }));
          break;
      }
    } catch (err) {
      this.log.debug?.(`teamster: event ${e.type} of ${this.attemptId}: ${err?.message ?? err}`);
    }
  }

  setResult(r) {
    if (this.result || r.attemptId !== this.attemptId) return;
    this.result = r;
    for (const w of this.resultWaiters.splice(0)) w(r);
  }

  /** abort cancels the attempt on the fleet (OpenClaw aborted the turn). */
  abort(reason) {
    if (this.abortReason) return;
    this.abortReason = reason || "user_abort";
    this.ctx.externalAbort = true;
    for (const w of this.abortWaiters.splice(0)) w();
    if (this.injector) this.injector.aborted = true;
    this.cancelLoop().catch(() => {});
  }

  /**
   * cancelLoop asks the worker running the attempt to cancel it. A queued
   * attempt has no worker yet (no_active_run): ask again until it is claimed
   * or has a result.
   */
  async cancelLoop() {
    const body = { v: VERSION, reason: `openclaw: ${this.abortReason}` };
    const until = Date.now() + this.cfg.queueTimeoutMs + Math.max(this.cfg.settlementTimeoutMs, 5000);
    while (!this.result && !this.ended.signal.aborted && Date.now() < until) {
      try {
        const rep = await this.fleet.request(runCancelSubject(this.attemptId, this.cfg.gatewayId), body, Math.min(this.cfg.requestTimeoutMs, 5000));
        if (rep.status === "ok" || rep.status === "accepted") return;
        if (rep.error?.code !== "no_active_run") return;
      } catch (err) {
        if (!(err instanceof TeamsterError)) return;
      }
      await sleep(250, this.ended.signal);
    }
  }

  /**
   * waitResult waits for the attempt's one terminal result: the result event,
   * or the durable result (checked every resultPollMs, so a lost event cannot
   * lose it). After an abort it waits the settlement budget for the fleet's
   * cancelled result, then reports the abort itself.
   */
  async waitResult(attempt) {
    const deadline = Date.now() + attempt.queueTimeoutMs + attempt.timeoutMs + attempt.settlementTimeoutMs + 30000;
    let abortedAt = null;
    const graceMs = Math.max(this.cfg.settlementTimeoutMs, 5000);
    while (!this.result) {
      if (this.abortReason && abortedAt === null) abortedAt = Date.now();
      const now = Date.now();
      if (abortedAt !== null && now - abortedAt > graceMs) {
        return {
          v: VERSION, attemptId: this.attemptId, status: "cancelled", assistantTexts: [], usage: { outputTokens: this.lastUsage },
          error: { code: "cancelled", message: `the turn was aborted in OpenClaw; the fleet did not confirm the cancel within ${graceMs} ms`, sideEffects: "possible" },
        };
      }
      if (now > deadline) {
        throw new TeamsterError("internal", `teamster: no result for attempt ${this.attemptId} from ${this.fleet.natsUrl} by its deadline`, "possible");
      }
      const wait = Math.min(this.cfg.resultPollMs, deadline - now, abortedAt !== null ? graceMs : Infinity);
      const got = await new Promise((resolve) => {
        const t = setTimeout(() => resolve(null), Math.max(1, wait));
        this.resultWaiters.push((r) => {
          clearTimeout(t);
          resolve(r);
        });
        if (!this.abortReason) {
          this.abortWaiters.push(() => {
            clearTimeout(t);
            resolve(null);
          });
        }
      });
      if (got || this.result) break;
      try {
        const durable = await this.fleet.getResult(this.attemptId);
        if (durable) this.setResult(durable);
      } catch (err) {
        this.log.debug?.(`teamster: durable result of ${this.attemptId}: ${err?.message ?? err}`);
      }
    }
    return this.result;
  }

  /** mirror writes the fleet's reply into OpenClaw's transcript. */
  async mirror(out, r) {
    const append = this.runtime.appendTranscriptMessage;
    const text = replyText(r.assistantTexts);
    if (!append || !text) return;
    const p = this.params;
    const key = `teamster:${this.attemptId}`;
    try {
      const message = out.lastAssistant ?? assistantMessage(text, { provider: p.provider, modelId: p.modelId, api: this.ctx.api });
      const res = await append({
        agentId: p.agentId,
        sessionKey: p.sessionKey,
        sessionId: p.sessionId,
        config: p.config,
        message,
        idempotencyKey: key,
      });
      if (res && (res.appended === true || res.ok === true || res.messageId)) {
        out.assistantTranscriptOwned = true;
        out.assistantTranscriptIdempotencyKey = key;
      }
    } catch (err) {
      this.log.warn?.(`teamster: could not mirror the reply of ${this.attemptId} into the transcript: ${err?.message ?? err}`);
    }
  }
}
