// Reading files of the worker's workspace while a fleet turn stages its
// reply attachments (docs/PROTOCOL.md, "Reply media"): the worker serves
// teamster.run.<attemptId>.read (for a gateway its identified form,
// teamster.run.<attemptId>.read.gateway.<gatewayId>), relayed by the
// routers, to the holder of the replyMedia callback's token, until the
// plugin answers that callback.

import { posix } from "node:path";
import { TeamsterError, VERSION, runReadSubject } from "./wire.js";

/** CHUNK is one read's length: bus.MaxReadChunk. */
export const CHUNK = 512 * 1024;

export class WorkspaceReader {
  /**
   * fleet: request(subject, body) and cfg (its gatewayId names the
   * identified read subject); attemptId and token: the run's;
   * LocalMediaAccessError: OpenClaw's (openclaw/plugin-sdk/web-media), so
   * that a missing file gives OpenClaw's "File not found" notice.
   */
  constructor({ fleet, attemptId, token, LocalMediaAccessError }) {
    this.fleet = fleet;
    this.attemptId = attemptId;
    this.token = token;
    this.AccessError = LocalMediaAccessError;
    this.files = 0;
  }

  accessError(code, message) {
    return typeof this.AccessError === "function" ? new this.AccessError(code, message) : new TeamsterError("invalid_request", message);
  }

  /**
   * read is OpenClaw's readWorkspaceFile(relativePath, {maxBytes, signal}):
   * the file's bytes, read in chunks; a missing file, one the workspace does
   * not give out, and one over maxBytes are errors (OpenClaw turns them into
   * its failure notices).
   */
  async read(relativePath, { maxBytes, signal } = {}) {
    const path = posix.normalize(String(relativePath).replaceAll("\\", "/")).replace(/^(\.\/)+/, "");
    const chunks = [];
    let offset = 0;
    for (;;) {
      signal?.throwIfAborted();
      const rep = await this.fleet.request(runReadSubject(this.attemptId, this.fleet.cfg?.gatewayId), { v: VERSION, token: this.token, path, offset, length: CHUNK });
      if (rep.status !== "ok") {
        const msg = `${relativePath}: ${rep.error?.message ?? "refused"}`;
        if (rep.reason === "not_found") throw this.accessError("not-found", msg);
        if (rep.reason === "denied") throw this.accessError("path-not-allowed", msg);
        throw TeamsterError.from(rep.error, msg);
      }
      if (Number.isFinite(maxBytes) && rep.size > maxBytes) {
        throw new Error(`Media exceeds ${maxBytes} bytes limit: ${relativePath} is ${rep.size} bytes`);
      }
      const data = Buffer.from(rep.data ?? "", "base64");
      chunks.push(data);
      offset += data.length;
      if (rep.eof || data.length === 0) break;
    }
    this.files++;
    return Buffer.concat(chunks);
  }
}
