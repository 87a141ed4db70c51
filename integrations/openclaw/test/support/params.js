// A minimal OpenClaw attempt params object for the unit tests.

/** params is OpenClaw's runAttempt params for one turn, with extra on top. */
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
