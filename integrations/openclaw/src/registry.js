// Registry: a cached copy of KV TEAMSTER_WORKERS. KV entries that expire
// vanish without a delete notice, so, as routers do, an entry counts only
// while its last update arrived less than the bucket TTL ago by this
// process's own clock.

export const REGISTRY_TTL_MS = 10_000;

const decoder = new TextDecoder();

export class Registry {
  constructor({ now = Date.now, ttlMs = REGISTRY_TTL_MS } = {}) {
    this.now = now;
    this.ttlMs = ttlMs;
    this.entries = new Map();
    this.known = false;
  }

  markKnown() {
    this.known = true;
  }

  reset() {
    this.known = false;
    this.entries.clear();
  }

  put(key, value) {
    let e;
    try {
      e = JSON.parse(typeof value === "string" ? value : decoder.decode(value));
    } catch {
      return;
    }
    if (!e || e.v !== 1 || typeof e.workerId !== "string" || !Array.isArray(e.harnesses)) return;
    this.entries.set(key, { entry: e, seenAt: this.now() });
  }

  delete(key) {
    this.entries.delete(key);
  }

  /** The manifests live (active or draining, fresh) workers advertise. */
  liveManifests() {
    const now = this.now();
    const out = [];
    for (const { entry, seenAt } of this.entries.values()) {
      if (now - seenAt >= this.ttlMs) continue;
      if (entry.state !== "active" && entry.state !== "draining") continue;
      for (const m of entry.harnesses) if (m && typeof m.id === "string") out.push(m);
    }
    return out;
  }
}
