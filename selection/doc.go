// Package selection chooses the agent harness that runs one prepared attempt,
// and writes down why (docs/PROTOCOL.md, "Selection"). It is pure: it reads the
// runtime policy from an OpenClaw-format JSON config (ParsePolicy, LoadPolicy),
// and Select turns a policy, the facts of one attempt and the manifests of
// the registered harnesses into a Decision with its debug Record. It does no
// other I/O and imports only the standard library and the root package.
//
// # Runtime resolution
//
// The runtime is resolved first; the first level that sets one wins:
//
//  1. the session pin: Facts.AgentHarnessID, else
//     Facts.AgentHarnessRuntimeOverride (source "pin");
//  2. the agent's agents.list[id == agentId].models["p/m"].agentRuntime.id;
//  3. agents.defaults.models["p/m"].agentRuntime.id;
//  4. models.providers.<p>.models[id == modelId].agentRuntime.id;
//  5. the agent's wildcard models["p/*"], then the defaults' wildcard
//     (levels 2 to 5 are source "model");
//  6. models.providers.<p>.agentRuntime.id (source "provider");
//  7. otherwise "auto" (source "auto").
//
// Two runtime values are special at every level. "default" means "not set
// here": resolution keeps looking at the next level, as for an absent value.
// "auto" is a match: it stops resolution with that level's source and selects
// in auto mode, so an explicit model-level "auto" overrides a provider-level
// harness. The value "openclaw" is the embedded runtime.
//
// The legacy whole-agent agents.defaults.agentRuntime and
// agents.list[].agentRuntime are ignored; the record carries a note saying so.
//
// Provider ids and agent ids are compared case-insensitively (after trimming
// spaces), so that "OpenAI" in a config matches the provider "openai" instead
// of silently leaving it to auto. Model ids and harness ids are compared
// exactly.
//
// # Harness selection
//
// "openclaw" selects the embedded runtime (forced_openclaw). Any other explicit
// runtime names a harness: when no registered manifest has that id the result
// is harness_not_registered; when the harness does not support the prepared
// routes the result is plugin_declared_fallback_openclaw if its manifest
// declares fallbackRuntime "openclaw", else harness_unsupported_route; when it
// supports them, forced_plugin. These rules hold for session pins too, with
// one difference: a pinned harness that does not support the route fails
// closed (harness_unsupported_route) even when its manifest declares the
// openclaw fallback, because the pin owns the session's native transcript and
// a switch would fork it. A pin never makes an unsupported route supported.
//
// "auto" probes every registered harness whose autoSelection.providerIds holds
// the provider (all providers when autoSelection is absent, none when the list
// is empty), in order of priority descending then id ascending; the first that
// supports the prepared routes is selected (auto_plugin), and when none does
// the embedded runtime runs the turn (auto_openclaw).
//
// # Route support
//
// A harness supports the prepared routes (Supports) when there is at least one
// route and every route declares a runtimePolicy whose compatibleIds lists the
// harness id, and no route has requestTransportOverrides "present" unless the
// manifest sets reproducesRequestOverrides. A value other than "none",
// "present" or empty is treated as "present". With several routes this is
// the intersection of their compatible ids. preparedAuth names an auth owner
// and never implies support; a provider or model prefix alone never selects a
// harness.
//
// # Registered manifests
//
// Manifests that fail Manifest.Validate (for example a reserved id) are
// skipped with a note. Several workers may register one id: duplicates are
// folded into one, and when their manifests differ the one that sorts first
// in a fixed field order is used (with a note), so that the result never
// depends on the order of the registered list.
package selection
