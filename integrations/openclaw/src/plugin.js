// The plugin object without OpenClaw's SDK imports, so that tests can build it
// with their own runtime. src/index.js binds OpenClaw's SDK.

import { randomBytes } from "node:crypto";
import { resolveConfig } from "./config.js";
import { Fleet } from "./fleet.js";
import { createTeamsterHarness } from "./harness.js";

export const PLUGIN_ID = "teamster";

// One fleet connection per process and configuration: OpenClaw may call
// register() more than once (config snapshots, reloads).
const fleets = new Map();
const processHostId = `oc-${randomBytes(6).toString("hex")}`;

function fleetFor(cfg, logger) {
  const key = JSON.stringify({ ...cfg, routes: undefined });
  let f = fleets.get(key);
  if (!f || f._closed) {
    f = new Fleet({ cfg, logger });
    fleets.set(key, f);
  }
  return f;
}

/** createPlugin returns the {id, name, description, register(api)} entry. */
export function createPlugin(runtime = {}) {
  return {
    id: PLUGIN_ID,
    name: "teamster",
    description: "Runs OpenClaw agent turns on a teamster fleet (NATS): submit, events, steering, cancel, host tools.",
    register(api) {
      const logger = api.logger;
      const cfg = resolveConfig(api.pluginConfig ?? {}, process.env, { defaultHostId: processHostId });
      const fleet = fleetFor(cfg, logger);
      // This registration's use of the shared connection: released when
      // OpenClaw disposes its harness or stops its service, whichever comes
      // first. The connection closes when no registration uses it.
      const registration = {};
      fleet.hold(registration);
      const drop = () => fleet.drop(registration);
      api.registerAgentHarness(createTeamsterHarness({ cfg, fleet, runtime, logger, onDispose: drop }));
      if (typeof api.registerService === "function") {
        api.registerService({
          id: "teamster-fleet",
          start: () => fleet.warmUp(),
          stop: drop,
        });
      }
    },
  };
}
