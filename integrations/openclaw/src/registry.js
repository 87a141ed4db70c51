// Registry: the plugin's cached copy of the harnesses the fleet hosts, as the
// routers answer teamster.get.harnesses (the manifests live workers
// advertise, as the answering router sees its registry). Each successful
// poll replaces the list and stamps it with this process's clock; a list
// not refreshed within the workers' registry TTL counts as empty, so that a
// poll that stalls cannot keep a stale fleet alive in supports().

export const REGISTRY_TTL_MS = 10_000;

export class Registry {
  constructor({ now = Date.now, ttlMs = REGISTRY_TTL_MS } = {}) {
    this.now = now;
    this.ttlMs = ttlMs;
    this.manifests = [];
    this.seenAt = 0;
    this.known = false;
  }

  markKnown() {
    this.known = true;
  }

  reset() {
    this.known = false;
    this.manifests = [];
    this.seenAt = 0;
  }

  /**
   * set replaces the cached manifests with the ones a poll read (seen now).
   * Entries that are not manifests (objects with a string id) are dropped.
   */
  set(manifests) {
    this.manifests = (Array.isArray(manifests) ? manifests : []).filter((m) => m && typeof m === "object" && !Array.isArray(m) && typeof m.id === "string");
    this.seenAt = this.now();
  }

  /** The manifests live (active or draining) workers advertise; none when the list is stale. */
  liveManifests() {
    if (this.now() - this.seenAt >= this.ttlMs) return [];
    return [...this.manifests];
  }
}
