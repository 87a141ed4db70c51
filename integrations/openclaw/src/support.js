// supports(): can the fleet run this prepared route? Pure, answered from the
// route facts and a snapshot of the fleet's registry (docs/PROTOCOL.md, "Selection").

import { routeFacts } from "./attempt.js";

/** Whether a manifest supports the route facts (compatibleIds, overrides). */
export function manifestSupports(m, modelProvider) {
  const ids = modelProvider?.runtimePolicy?.compatibleIds;
  if (!Array.isArray(ids) || !ids.includes(m.id)) return [false, `runtimePolicy.compatibleIds does not list ${m.id}`];
  if (modelProvider.requestTransportOverrides === "present" && m.reproducesRequestOverrides !== true) {
    return [false, `requestTransportOverrides present and ${m.id} does not reproduce them`];
  }
  return [true, ""];
}

function autoCandidate(m, provider) {
  const ids = m.autoSelection?.providerIds;
  return !Array.isArray(ids) || ids.includes(provider);
}

/**
 * decideSupport answers OpenClaw's supports(ctx). registry is null while the
 * plugin has not read the fleet's registry (not connected yet, or the fleet is
 * down): then a route the operator configured is supported, so that the turn
 * reaches runAttempt and fails closed there with the fleet's address, and an
 * unconfigured route is supported only when its facts name a runtime.
 */
export function decideSupport(cfg, ctx, registry, natsUrl = cfg.natsUrl) {
  const at = ` at ${Array.isArray(natsUrl) ? natsUrl.join(",") : natsUrl}`;
  const facts = routeFacts(cfg, ctx?.provider, ctx?.modelId, ctx?.modelProvider);
  const ids = facts.modelProvider.runtimePolicy?.compatibleIds ?? [];
  if (!facts.configured && ids.length === 0) {
    return { supported: false, reason: `teamster: no route configured for ${ctx?.provider}/${ctx?.modelId} and the route declares no compatible fleet runtime` };
  }
  if (!registry) {
    return { supported: true, priority: 10, reason: "teamster: fleet registry not read yet; the fleet decides at submit" };
  }
  const manifests = registry.liveManifests();
  if (facts.runtime) {
    const m = manifests.find((x) => x.id === facts.runtime);
    if (!m) return { supported: false, reason: `teamster: no live worker${at} registers fleet harness ${facts.runtime} (harness_not_registered)` };
    const [ok, why] = manifestSupports(m, facts.modelProvider);
    return ok ? { supported: true, priority: 10 } : { supported: false, reason: `teamster${at}: ${why} (harness_unsupported_route)` };
  }
  const cands = manifests.filter((m) => autoCandidate(m, facts.provider));
  for (const m of cands) {
    if (manifestSupports(m, facts.modelProvider)[0]) return { supported: true, priority: 10 };
  }
  return { supported: false, reason: `teamster: no live fleet harness${at} supports ${facts.provider}/${facts.modelId}` };
}
