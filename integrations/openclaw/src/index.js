// OpenClaw loads this entry (package.json openclaw.extensions). It binds the
// SDK helpers the harness needs: the active-run registry (steering), the
// session transcript (mirroring the fleet's reply), the tool-result
// middleware, the agent-end side effects, the user questions and the reply
// media errors (OpenClaw's seams, which a plugin harness runs itself).

import {
  awaitAgentEndSideEffects,
  cancelPendingAgentQuestionForSession,
  claimPendingAgentQuestionAnswer,
  clearActiveEmbeddedRun,
  createAgentToolResultMiddlewareRunner,
  runAgentEndSideEffects,
  runAgentHarnessGatewayQuestion,
  setActiveEmbeddedRun,
} from "openclaw/plugin-sdk/agent-harness-runtime";
import { appendSessionTranscriptMessageByIdentity } from "openclaw/plugin-sdk/session-transcript-runtime";
import { LocalMediaAccessError } from "openclaw/plugin-sdk/web-media";
import { createPlugin } from "./plugin.js";

export default createPlugin({
  setActiveEmbeddedRun,
  clearActiveEmbeddedRun,
  appendTranscriptMessage: appendSessionTranscriptMessageByIdentity,
  createAgentToolResultMiddlewareRunner,
  runAgentEndSideEffects,
  awaitAgentEndSideEffects,
  runAgentHarnessGatewayQuestion,
  claimPendingAgentQuestionAnswer,
  cancelPendingAgentQuestionForSession,
  LocalMediaAccessError,
});
