// Host callbacks: the worker running an attempt calls back into the gateway
// that submitted it, on teamster.host.<hostId>.<attemptId>.<call> (docs/PROTOCOL.md,
// "Envelopes"). This answers them from OpenClaw's tool surface for the turn.

import { TeamsterError, VERSION, decode } from "./wire.js";

function rejected(code, message) {
  return { v: VERSION, status: "rejected", error: { code, message } };
}

function errorText(err) {
  if (!err) return "";
  if (typeof err === "string") return err;
  if (typeof err.message === "string") return err.message;
  try {
    return JSON.stringify(err);
  } catch {
    return String(err);
  }
}

/** JSON-safe copy of a tool result (functions and cycles dropped). */
function jsonSafe(v) {
  const seen = new WeakSet();
  return JSON.parse(
    JSON.stringify(v ?? null, (_k, x) => {
      if (typeof x === "function" || typeof x === "bigint" || typeof x === "symbol") return undefined;
      if (x && typeof x === "object") {
        if (seen.has(x)) return undefined;
        seen.add(x);
      }
      return x;
    }) ?? "null",
  );
}

/**
 * HostCallbacks answers one attempt's host callbacks.
 * params: OpenClaw's attempt params; tools(): the tool surface (lazy);
 * toolsAllow: the attempt's allow-list (undefined = unrestricted);
 * signal: aborts running tools when the turn ends; hostAssert(id): whether
 * the OpenClaw assertion of a source-bound steering item still holds;
 * middleware: OpenClaw's tool-result middleware runner for the turn
 * (applyToolResultMiddleware), when there is one; askUser: OpenClaw's
 * runAgentHarnessGatewayQuestion (the SDK's blocking question); replyMedia:
 * stages the reply's attachments from the worker's workspace.
 */
export class HostCallbacks {
  constructor({ params, tools, toolsAllow, signal, onToolMeta, hostAssert, middleware, askUser, log, attemptId, replyMedia }) {
    this.params = params;
    this.replyMedia = replyMedia;
    this.middleware = middleware;
    this.askUser = askUser;
    this.log = log ?? {};
    this.attemptId = attemptId;
    this.hostAssert = hostAssert ?? (() => false);
    this.tools = tools;
    this.toolsAllow = toolsAllow;
    this.signal = signal;
    this.onToolMeta = onToolMeta ?? (() => {});
  }

  /** handle answers one callback: call is tool, toolTerminal, userInput, usage or assertCurrent. */
  async handle(call, data) {
    let body;
    try {
      body = decode(data);
    } catch (err) {
      return rejected("invalid_request", err.message);
    }
    try {
      switch (call) {
        case "tool":
          return await this.tool(body);
        case "toolTerminal":
          return this.toolTerminal(body);
        case "userInput":
          return await this.userInput(body);
        case "replyMedia":
          if (typeof body.token !== "string" || !body.token) return rejected("invalid_request", "a replyMedia call carries its token");
          await this.replyMedia?.(body);
          return { v: VERSION, status: "ok" };
        case "assertCurrent":
          if (typeof body.assertion !== "string" || !body.assertion) return rejected("invalid_request", "an assertCurrent call names its assertion");
          return { v: VERSION, status: "ok", current: this.hostAssert(body.assertion) === true };
        case "usage":
          // Output tokens reach OpenClaw from the attempt's usage events
          // (one report per response); nothing to do here.
          return { v: VERSION, status: "ok" };
        default:
          return rejected("invalid_request", `unknown host call ${JSON.stringify(call)}`);
      }
    } catch (err) {
      this.log.warn?.(`teamster: attempt ${this.attemptId} host callback ${call} failed: ${errorText(err)}`);
      return rejected(err instanceof TeamsterError ? err.code : "internal", errorText(err));
    }
  }

  /** refuseTool is a tool call's refusal, logged: the fleet's harness sees only the error. */
  refuseTool(code, name, message) {
    this.log.info?.(`teamster: attempt ${this.attemptId} tool ${name} refused: ${message}`);
    return rejected(code, message);
  }

  async tool(body) {
    if (typeof body.callId !== "string" || !body.callId || typeof body.name !== "string" || !body.name) {
      return rejected("invalid_request", "a tool call carries callId and name");
    }
    if (Array.isArray(this.toolsAllow) && !this.toolsAllow.includes(body.name) && !this.toolsAllow.includes("*")) {
      return this.refuseTool("invalid_request", body.name, `tool ${body.name} is not allowed for this turn`);
    }
    const surface = await this.tools();
    const tool = surface.find((t) => t?.name === body.name);
    if (!tool || typeof tool.execute !== "function") {
      return this.refuseTool("invalid_request", body.name, `OpenClaw has no tool named ${body.name} for this turn (it has ${surface.length}: ${surface.map((t) => t?.name).slice(0, 20).join(", ")})`);
    }
    const args = body.args && typeof body.args === "object" ? body.args : {};
    try {
      const result = await tool.execute(body.callId, args, this.signal);
      const isError = result?.isError === true || result?.details?.isError === true;
      this.onToolMeta({ toolName: body.name, toolCallId: body.callId, isError });
      let out = { content: result?.content ?? [], details: result?.details };
      if (this.middleware) {
        out = await this.middleware.applyToolResultMiddleware({
          toolCallId: body.callId, toolName: body.name, args, cwd: this.params.cwd ?? this.params.workspaceDir, isError, result: out,
        });
      }
      return { v: VERSION, status: "ok", result: jsonSafe({ content: out?.content ?? [], details: out?.details }) };
    } catch (err) {
      this.onToolMeta({ toolName: body.name, toolCallId: body.callId, isError: true });
      return rejected("harness_failed", `tool ${body.name} failed: ${errorText(err)}`);
    }
  }

  /**
   * userInput asks the turn's user a blocking question through OpenClaw's
   * own question path (runAgentHarnessGatewayQuestion: the prompt goes to the
   * turn's channel, the answer comes back from it, a plain reply or the
   * question's buttons) and answers the fleet's harness with it.
   */
  async userInput(body) {
    if (typeof body.question !== "string" || !body.question) return rejected("invalid_request", "a userInput call carries a question");
    if (typeof this.askUser !== "function") {
      return rejected("invalid_request", "teamster: this OpenClaw cannot ask the user a blocking question (its SDK has no question helper)");
    }
    const p = this.params;
    const choices = Array.isArray(body.choices) ? body.choices.filter((c) => typeof c === "string" && c) : [];
    const questions = [{ id: "answer", header: "Question", question: body.question, ...(choices.length > 0 ? { options: choices.map((label) => ({ label })) } : {}) }];
    this.log.info?.(`teamster: attempt ${this.attemptId} asks the user a question (session ${p.sessionKey})`);
    const r = await this.askUser({
      questions, sessionKey: p.sessionKey, agentId: p.agentId, runId: p.runId,
      timeoutMs: Number.isInteger(p.timeoutMs) && p.timeoutMs > 0 ? p.timeoutMs : 600000,
      delivery: p, signal: this.signal,
    });
    if (r?.status === "answered") {
      const a = r.answers?.answers?.answer;
      return { v: VERSION, status: "ok", answer: Array.isArray(a) ? a.join(", ") : String(a ?? "") };
    }
    if (r?.status === "expired" || r?.status === "pending") return rejected("deadline_exceeded", "teamster: the user did not answer in time");
    return rejected("cancelled", "teamster: the question was cancelled before the user answered");
  }

  toolTerminal(body) {
    if (typeof body.callId !== "string" || typeof body.name !== "string" || (body.outcome !== "success" && body.outcome !== "failure")) {
      return rejected("invalid_request", "a toolTerminal report carries callId, name and outcome success or failure");
    }
    const observe = this.params.observeToolTerminal;
    if (typeof observe !== "function") return { v: VERSION, status: "ok" };
    const obs = {
      toolCallId: body.callId,
      toolName: body.name,
      arguments: body.args && typeof body.args === "object" ? body.args : {},
      executionStarted: body.executionStarted === true,
      outcome: body.outcome,
    };
    if (body.outcome === "failure") obs.failure = { error: errorText(body.error) || "tool failed" };
    const res = observe(obs);
    const out = { v: VERSION, status: "ok" };
    if (res?.lastToolError) out.lastToolError = jsonSafe(res.lastToolError);
    return out;
  }
}
