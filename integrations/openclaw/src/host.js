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
 * signal: aborts running tools when the turn ends.
 */
export class HostCallbacks {
  constructor({ params, tools, toolsAllow, signal, onToolMeta }) {
    this.params = params;
    this.tools = tools;
    this.toolsAllow = toolsAllow;
    this.signal = signal;
    this.onToolMeta = onToolMeta ?? (() => {});
  }

  /** handle answers one callback: call is tool, toolTerminal, userInput or usage. */
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
          return rejected("invalid_request", "teamster: this OpenClaw gateway cannot ask the user a blocking question for a fleet turn");
        case "usage":
          // Output tokens reach OpenClaw from the attempt's usage events
          // (one report per response); nothing to do here.
          return { v: VERSION, status: "ok" };
        default:
          return rejected("invalid_request", `unknown host call ${JSON.stringify(call)}`);
      }
    } catch (err) {
      return rejected(err instanceof TeamsterError ? err.code : "internal", errorText(err));
    }
  }

  async tool(body) {
    if (typeof body.callId !== "string" || !body.callId || typeof body.name !== "string" || !body.name) {
      return rejected("invalid_request", "a tool call carries callId and name");
    }
    if (Array.isArray(this.toolsAllow) && !this.toolsAllow.includes(body.name) && !this.toolsAllow.includes("*")) {
      return rejected("invalid_request", `tool ${body.name} is not allowed for this turn`);
    }
    const surface = await this.tools();
    const tool = surface.find((t) => t?.name === body.name);
    if (!tool || typeof tool.execute !== "function") {
      return rejected("invalid_request", `OpenClaw has no tool named ${body.name} for this turn`);
    }
    const args = body.args && typeof body.args === "object" ? body.args : {};
    try {
      const result = await tool.execute(body.callId, args, this.signal);
      const isError = result?.isError === true || result?.details?.isError === true;
      this.onToolMeta({ toolName: body.name, toolCallId: body.callId, isError });
      return { v: VERSION, status: "ok", result: jsonSafe({ content: result?.content ?? [], details: result?.details }) };
    } catch (err) {
      this.onToolMeta({ toolName: body.name, toolCallId: body.callId, isError: true });
      return rejected("harness_failed", `tool ${body.name} failed: ${errorText(err)}`);
    }
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
