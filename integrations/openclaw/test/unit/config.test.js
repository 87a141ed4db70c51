// The plugin config's NATS identity settings (src/config.js) and the connect
// options they give (src/fleet.js connectOptions). Pure: no server.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { nkeys } from "@nats-io/transport-node";
import { CONFIG_KEYS, ENV, resolveConfig } from "../../src/config.js";
import { connectOptions, readNkeySeed } from "../../src/fleet.js";
import { submitSubject } from "../../src/harness.js";
import { pluginDir } from "../support/env.js";

test("gatewayId: the gateway's submit subject, host id and inbox prefix", () => {
  const c = resolveConfig({ gatewayId: "gw-1" }, {}, { defaultHostId: "oc-123" });
  assert.equal(c.gatewayId, "gw-1");
  assert.equal(c.hostId, "gw-1", "hostId defaults to the gatewayId, not the per-process id");
  assert.equal(c.inboxPrefix, "_INBOX.gateway.gw-1");
  assert.equal(submitSubject(c), "teamster.submit.gateway.gw-1");
  assert.equal(resolveConfig({ gatewayId: "gw-1", hostId: "gw-1" }).hostId, "gw-1", "hostId equal to gatewayId is fine");
  assert.throws(() => resolveConfig({ gatewayId: "gw-1", hostId: "gw-2" }), /hostId "gw-2" is not gatewayId "gw-1"/);
  for (const bad of ["", "a.b", "-x", "x*", "a".repeat(65), 7]) {
    assert.throws(() => resolveConfig({ gatewayId: bad }), /gatewayId must match/, JSON.stringify(bad));
  }
});

test("delegatePluginId with gatewayId: a delegate bound to the gateway, its subject and inbox", () => {
  const c = resolveConfig({ gatewayId: "gw-1", delegatePluginId: "voice-call" }, {}, { defaultHostId: "oc-123" });
  assert.equal(c.inboxPrefix, "_INBOX.delegate.gw-1.voice-call");
  assert.equal(c.hostId, "gw-1", "a bound delegate's attempts call back its gateway's host id");
  assert.equal(submitSubject(c), "teamster.submit.delegate.voice-call.gateway.gw-1");
  assert.throws(() => resolveConfig({ gatewayId: "gw-1", delegatePluginId: "voice-call", hostId: "h2" }), /hostId "h2" is not gatewayId "gw-1"/);
  assert.equal(resolveConfig({ gatewayId: "gw-1", delegatePluginId: "v", inboxPrefix: "_INBOX.x" }).inboxPrefix, "_INBOX.x");
});

test("without gatewayId: the owner subject or the delegate's, and their inboxes", () => {
  const owner = resolveConfig({}, {}, { defaultHostId: "oc-123" });
  assert.equal(owner.hostId, "oc-123");
  assert.equal(owner.inboxPrefix, undefined, "the client's _INBOX");
  assert.equal(submitSubject(owner), "teamster.submit");
  assert.equal(resolveConfig({ hostId: "h7" }, {}, { defaultHostId: "oc-123" }).hostId, "h7");
  const delegate = resolveConfig({ delegatePluginId: "voice-call" }, {}, { defaultHostId: "oc-123" });
  assert.equal(delegate.inboxPrefix, "_INBOX.delegate.voice-call");
  assert.equal(delegate.hostId, "oc-123");
  assert.equal(submitSubject(delegate), "teamster.submit.delegate.voice-call");
});

test("inboxPrefix overrides the derived prefix and must be a subject without wildcards", () => {
  assert.equal(resolveConfig({ gatewayId: "gw-1", inboxPrefix: "_INBOX.custom.gw" }).inboxPrefix, "_INBOX.custom.gw");
  assert.equal(resolveConfig({ delegatePluginId: "v", inboxPrefix: "_I" }).inboxPrefix, "_I");
  for (const bad of ["", "_INBOX.", ".x", "_INBOX..a", "_INBOX.*", "_INBOX.>", "a b", "é", "x".repeat(201), 3]) {
    assert.throws(() => resolveConfig({ inboxPrefix: bad }), /inboxPrefix must be/, JSON.stringify(bad));
  }
});

test("nkeyFile and tlsCaFile, and the environment variables of the identity settings", () => {
  assert.deepEqual(ENV, {
    natsUrl: "TEAMSTER_NATS_URL",
    gatewayId: "TEAMSTER_GATEWAY_ID",
    inboxPrefix: "TEAMSTER_NATS_INBOX_PREFIX",
    nkeyFile: "TEAMSTER_NATS_NKEY",
    tlsCaFile: "TEAMSTER_NATS_TLS_CA",
  });
  const env = {
    TEAMSTER_NATS_URL: "tls://fleet:4222",
    TEAMSTER_GATEWAY_ID: "gw-env",
    TEAMSTER_NATS_NKEY: "/env/gw.nk",
    TEAMSTER_NATS_TLS_CA: "/env/ca.pem",
  };
  const c = resolveConfig({}, env, { defaultHostId: "oc-1" });
  assert.deepEqual(
    { natsUrl: c.natsUrl, gatewayId: c.gatewayId, hostId: c.hostId, inboxPrefix: c.inboxPrefix, nkeyFile: c.nkeyFile, tlsCaFile: c.tlsCaFile },
    { natsUrl: "tls://fleet:4222", gatewayId: "gw-env", hostId: "gw-env", inboxPrefix: "_INBOX.gateway.gw-env", nkeyFile: "/env/gw.nk", tlsCaFile: "/env/ca.pem" },
  );
  assert.equal(resolveConfig({}, { ...env, TEAMSTER_NATS_INBOX_PREFIX: "_INBOX.x" }).inboxPrefix, "_INBOX.x");
  // The config wins key by key; its own authentication replaces the environment's NKey.
  const mine = resolveConfig({ gatewayId: "gw-cfg", nkeyFile: "/cfg/gw.nk", tlsCaFile: "/cfg/ca.pem" }, env);
  assert.deepEqual([mine.gatewayId, mine.nkeyFile, mine.tlsCaFile], ["gw-cfg", "/cfg/gw.nk", "/cfg/ca.pem"]);
  for (const auth of [{ credsFile: "/c.creds" }, { token: "t" }, { user: "u", password: "p" }]) {
    assert.equal(resolveConfig(auth, env).nkeyFile, undefined, JSON.stringify(auth));
  }
  assert.throws(() => resolveConfig({ credsFile: "/c.creds", nkeyFile: "/n.nk" }), /credsFile and nkeyFile/);
  assert.throws(() => resolveConfig({ nkeyFile: "" }), /nkeyFile must be a non-empty string/);
  assert.throws(() => resolveConfig({ tlsCaFile: 1 }), /tlsCaFile must be a non-empty string/);
  assert.throws(() => resolveConfig({}, { TEAMSTER_GATEWAY_ID: "a.b" }), /TEAMSTER_GATEWAY_ID \(gatewayId\) must match/);
  assert.throws(() => resolveConfig({ hostId: "h2" }, { TEAMSTER_GATEWAY_ID: "gw" }), /hostId "h2" is not gatewayId "gw"/);
  assert.equal(resolveConfig({}, { TEAMSTER_GATEWAY_ID: "", TEAMSTER_NATS_NKEY: "" }).gatewayId, undefined, "empty variables count as unset");
});

test("the config's keys are the manifest's configSchema properties", () => {
  const manifest = JSON.parse(readFileSync(join(pluginDir, "openclaw.plugin.json"), "utf8"));
  assert.deepEqual([...CONFIG_KEYS].sort(), Object.keys(manifest.configSchema.properties).sort());
  const props = manifest.configSchema.properties;
  assert.equal(props.gatewayId.pattern, "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$");
  assert.equal(props.inboxPrefix.pattern, "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$");
});

test("connectOptions: the inbox prefix, the NKey authenticator and TLS verification", () => {
  const kp = nkeys.createUser();
  const seed = new TextDecoder().decode(kp.getSeed());
  const files = { "/gw.nk": `# gateway gw-1\n${seed}\n`, "/bad.nk": "no seed here\n" };
  const read = (p) => {
    if (!(p in files)) throw new Error(`ENOENT ${p}`);
    return files[p];
  };
  const cfg = resolveConfig({ natsUrl: "tls://fleet:4222", gatewayId: "gw-1", nkeyFile: "/gw.nk", tlsCaFile: "/ca.pem" });
  const o = connectOptions(cfg, read);
  assert.equal(o.inboxPrefix, "_INBOX.gateway.gw-1");
  assert.deepEqual(o.tls, { caFile: "/ca.pem" });
  assert.equal(o.name, "openclaw-teamster-gw-1");
  const nonce = "nonce-123";
  const auth = o.authenticator(nonce);
  assert.equal(auth.nkey, kp.getPublicKey());
  assert.ok(kp.verify(new TextEncoder().encode(nonce), nkeys.decode(auth.sig)), "the nonce is signed with the file's seed");
  assert.equal(new TextDecoder().decode(readNkeySeed("/gw.nk", read)), seed);
  assert.throws(() => readNkeySeed("/bad.nk", read), /nkeyFile \/bad\.nk holds no NKey user seed/);
  // tls:// without a CA file: TLS required, verified against the system's roots.
  assert.deepEqual(connectOptions(resolveConfig({ natsUrl: ["nats://a:1", "tls://b:2"] })).tls, {});
  const plain = connectOptions(resolveConfig({ natsUrl: "nats://a:1" }, {}, { defaultHostId: "oc-9" }));
  assert.equal(plain.tls, undefined);
  assert.equal(plain.inboxPrefix, undefined);
  assert.equal(plain.authenticator, undefined);
  assert.equal(plain.name, "openclaw-teamster-oc-9");
});
