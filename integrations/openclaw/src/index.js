// OpenClaw loads this entry (package.json openclaw.extensions). It binds the
// SDK helpers the harness needs: the active-run registry (steering) and the
// session transcript (mirroring the fleet's reply).

import { clearActiveEmbeddedRun, setActiveEmbeddedRun } from "openclaw/plugin-sdk/agent-harness-runtime";
import { appendSessionTranscriptMessageByIdentity } from "openclaw/plugin-sdk/session-transcript-runtime";
import { createPlugin } from "./plugin.js";

export default createPlugin({
  setActiveEmbeddedRun,
  clearActiveEmbeddedRun,
  appendTranscriptMessage: appendSessionTranscriptMessageByIdentity,
});
