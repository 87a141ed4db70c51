// The fleet's subjects as the plugin builds them (src/wire.js): the plain
// subjects of a gateway without identity, and the identified forms,
// <subject>.gateway.<gatewayId>, of a gateway with one (a tenant). Pure: no
// server.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  getHarnessesSubject, getResultSubject, identified, injectSubject, runCancelSubject, runInjectSubject, runReadSubject,
  sessionOpSubject, sourceGrantSubject, sourceRevokeSubject, submitDelegateSubject, submitGatewaySubject,
} from "../../src/wire.js";
import { submitSubject } from "../../src/harness.js";

const A = "01HZX3K5Q8F9W2M4N6P7R8S9T0";

test("identified: <subject>.gateway.<gatewayId> with a gateway id, the plain subject without", () => {
  assert.equal(identified("teamster.inject", "gw-1"), "teamster.inject.gateway.gw-1");
  for (const none of [undefined, null, ""]) assert.equal(identified("teamster.inject", none), "teamster.inject", String(none));
  for (const bad of ["a.b", "*", ">", "-x", "a".repeat(65)]) {
    assert.throws(() => identified("teamster.inject", bad), (e) => e.code === "invalid_request" && /gatewayId/.test(e.message), bad);
  }
});

test("every router-bound subject of a gateway is identified; without one it is plain", () => {
  const cases = [
    [(g) => injectSubject(g), "teamster.inject"],
    [(g) => runInjectSubject(A, g), `teamster.run.${A}.inject`],
    [(g) => runCancelSubject(A, g), `teamster.run.${A}.cancel`],
    [(g) => runReadSubject(A, g), `teamster.run.${A}.read`],
    [(g) => sourceGrantSubject(g), "teamster.source.grant"],
    [(g) => sourceRevokeSubject(g), "teamster.source.revoke"],
    [(g) => submitDelegateSubject("voice-call", g), "teamster.submit.delegate.voice-call"],
    [(g) => getResultSubject(g), "teamster.get.result"],
    [(g) => getHarnessesSubject(g), "teamster.get.harnesses"],
    ...["create", "patch", "reset", "delete", "archive"].map((op) => [(g) => sessionOpSubject(op, g), `teamster.session.${op}`]),
  ];
  for (const [build, plain] of cases) {
    assert.equal(build(undefined), plain);
    assert.equal(build("gw-1"), `${plain}.gateway.gw-1`);
  }
  assert.equal(submitGatewaySubject("gw-1"), "teamster.submit.gateway.gw-1", "a gateway's submit subject is its identified form");
  assert.equal(identified("teamster.submit", "gw-1"), submitGatewaySubject("gw-1"));
  assert.throws(() => sessionOpSubject("wipe", "gw-1"), /session operation "wipe"/);
  assert.throws(() => runCancelSubject("a.b", "gw-1"), /attemptId/);
});

test("submitSubject: the owner's, a gateway's, a delegate's and a bound delegate's", () => {
  assert.equal(submitSubject({}), "teamster.submit");
  assert.equal(submitSubject({ gatewayId: "gw-1" }), "teamster.submit.gateway.gw-1");
  assert.equal(submitSubject({ delegatePluginId: "voice-call" }), "teamster.submit.delegate.voice-call");
  assert.equal(submitSubject({ gatewayId: "gw-1", delegatePluginId: "voice-call" }), "teamster.submit.delegate.voice-call.gateway.gw-1");
});
