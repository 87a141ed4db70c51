package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/selection"
)

// Config is a worker's configuration file (docs/PROTOCOL.md, "Running it").
type Config struct {
	// WorkerID names the worker in leases, the registry and its control
	// subject; default a generated id.
	WorkerID string `json:"workerId"`
	// Slots is how many attempts the worker runs at once; default 64.
	Slots int `json:"slots"`
	// LeaseTTLMs is the session lease TTL; default 10000.
	LeaseTTLMs int64 `json:"leaseTtlMs"`
	// DrainTimeoutMs bounds a drain; default 60000.
	DrainTimeoutMs int64 `json:"drainTimeoutMs"`
	// NewEpochQuarantineMs: once the fleet sees a Redis node begin to serve
	// a hash slot that it may have taken over without its predecessor's
	// last writes (a promoted replica, a restarted or emptied node), no
	// session of the slot starts a new fence epoch for this long, so that
	// every lease granted before has self-fenced first. It must satisfy the
	// inequality in docs/ARCHITECTURE.md ("Fencing across failovers"), so at
	// least the longest leaseTtlMs in the fleet; default leaseTtlMs; -1
	// turns it off (only for a Redis known to be fresh, as in tests).
	NewEpochQuarantineMs int64 `json:"newEpochQuarantineMs,omitempty"`
	// MaxNativeStateBytes bounds the native state a session's turn saves
	// to, and restores from, the object store TEAMSTER_NATIVE_STATE;
	// default 64 MiB.
	MaxNativeStateBytes int64 `json:"maxNativeStateBytes,omitempty"`
	// Harnesses are the harnesses the worker hosts.
	Harnesses []HarnessConfig `json:"harnesses"`
}

// HarnessConfig is one hosted harness: its implementation and its manifest.
type HarnessConfig struct {
	// Implementation is "scripted", "codex" or "claude".
	Implementation string `json:"implementation"`
	// Settings are the implementation's own settings.
	Settings json.RawMessage `json:"settings,omitempty"`
	selection.Manifest
}

// Defaults.
const (
	DefaultSlots        = 64
	DefaultLeaseTTL     = 10 * time.Second
	defaultDrainTimeout = 60 * time.Second
	minLeaseTTL         = 500 * time.Millisecond
	// DefaultMaxNativeStateBytes bounds a session's saved native state.
	DefaultMaxNativeStateBytes = 64 << 20
)

// LoadConfig reads and validates a worker config file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("worker config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a worker config, applies its defaults and validates it.
// Unknown keys are errors: a misspelt key in an operator's file should not be
// silently ignored.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, err
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.WorkerID == "" {
		c.WorkerID = "w-" + ulid.Make().String()
	}
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.LeaseTTLMs == 0 {
		c.LeaseTTLMs = DefaultLeaseTTL.Milliseconds()
	}
	if c.DrainTimeoutMs == 0 {
		c.DrainTimeoutMs = defaultDrainTimeout.Milliseconds()
	}
	if c.MaxNativeStateBytes == 0 {
		c.MaxNativeStateBytes = DefaultMaxNativeStateBytes
	}
}

// Validate checks the config.
func (c *Config) Validate() error {
	if !bus.ValidID(c.WorkerID) {
		return fmt.Errorf("workerId %q must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", c.WorkerID)
	}
	if c.Slots < 1 || c.Slots > 100_000 {
		return fmt.Errorf("slots %d must be between 1 and 100000", c.Slots)
	}
	if c.LeaseTTL() < minLeaseTTL {
		return fmt.Errorf("leaseTtlMs %d must be at least %d", c.LeaseTTLMs, minLeaseTTL.Milliseconds())
	}
	if c.NewEpochQuarantineMs < -1 {
		return fmt.Errorf("newEpochQuarantineMs %d: use a duration, 0 for the lease TTL, or -1 for none", c.NewEpochQuarantineMs)
	}
	if c.MaxNativeStateBytes < 0 {
		return fmt.Errorf("maxNativeStateBytes %d must not be negative", c.MaxNativeStateBytes)
	}
	if c.DrainTimeoutMs < 0 {
		return fmt.Errorf("drainTimeoutMs %d must not be negative", c.DrainTimeoutMs)
	}
	if len(c.Harnesses) == 0 {
		return fmt.Errorf("harnesses: host at least one harness")
	}
	seen := map[string]bool{}
	for i, h := range c.Harnesses {
		if err := h.Manifest.Validate(); err != nil {
			return fmt.Errorf("harnesses[%d]: %w", i, err)
		}
		if seen[h.ID] {
			return fmt.Errorf("harnesses[%d]: harness id %q is hosted twice", i, h.ID)
		}
		seen[h.ID] = true
		if _, ok := implementation(h.Implementation); !ok {
			return fmt.Errorf("harnesses[%d] (%s): implementation %q is not one of %s", i, h.ID, h.Implementation, implementationNames())
		}
	}
	return nil
}

// LeaseTTL is the lease TTL.
func (c *Config) LeaseTTL() time.Duration { return time.Duration(c.LeaseTTLMs) * time.Millisecond }

// NewEpochQuarantine is the quarantine of new fence epochs on a Redis node
// that took a slot over, as leases.KeeperParams takes it: 0 for the lease
// TTL, negative for none.
func (c *Config) NewEpochQuarantine() time.Duration {
	return time.Duration(c.NewEpochQuarantineMs) * time.Millisecond
}

// MaxNativeState bounds a session's saved native state: MaxNativeStateBytes,
// or the default for a config built without ParseConfig.
func (c *Config) MaxNativeState() int64 {
	if c.MaxNativeStateBytes <= 0 {
		return DefaultMaxNativeStateBytes
	}
	return c.MaxNativeStateBytes
}

// DrainTimeout bounds a drain.
func (c *Config) DrainTimeout() time.Duration {
	return time.Duration(c.DrainTimeoutMs) * time.Millisecond
}
