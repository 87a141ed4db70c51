package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/claude"
	"github.com/teamster-fleet/teamster/harness/codex"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/selection"
)

// Factory builds a harness implementation from its manifest and settings.
type Factory func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error)

// FactoryEnv is what a factory may use from the worker.
type FactoryEnv struct {
	// Ledger, when set, receives the scripted harness's start/end records.
	Ledger scripted.Ledger
	// logger is the worker's logger (set by the worker).
	logger logrus.FieldLogger
}

var implMu sync.Mutex

var implementations = map[string]Factory{
	// scripted takes one setting, workspace: the directory its write steps
	// write into and reply attachments are read from.
	"scripted": func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error) {
		var s struct {
			Workspace string `json:"workspace"`
		}
		if len(settings) > 0 && string(settings) != "null" {
			dec := json.NewDecoder(bytes.NewReader(settings))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&s); err != nil {
				return nil, fmt.Errorf("scripted settings: %v (it takes only workspace)", err)
			}
		}
		if s.Workspace != "" && !filepath.IsAbs(s.Workspace) {
			return nil, fmt.Errorf("scripted settings: workspace %q is not an absolute path", s.Workspace)
		}
		return scripted.New(m, scripted.Options{Ledger: env.Ledger, Workspace: s.Workspace}), nil
	},
	// codex drives a Codex app-server process per worker (harness/codex).
	"codex": func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error) {
		return codex.Factory(m, settings, env.logger)
	},
	// claude runs one Claude Code CLI process per turn (harness/claude).
	"claude": func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error) {
		return claude.Factory(m, settings, env.logger)
	},
}

// RegisterImplementation makes a harness implementation available to worker
// configs under name ("implementation": name). Call it before building
// workers (from an init function or main); it replaces an earlier
// registration of the same name.
func RegisterImplementation(name string, f Factory) {
	implMu.Lock()
	defer implMu.Unlock()
	implementations[name] = f
}

func implementation(name string) (Factory, bool) {
	implMu.Lock()
	defer implMu.Unlock()
	f, ok := implementations[name]
	return f, ok
}

func implementationNames() string {
	implMu.Lock()
	defer implMu.Unlock()
	names := make([]string, 0, len(implementations))
	for n := range implementations {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
