package worker

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/teamster-fleet/teamster/harness"
	"github.com/teamster-fleet/teamster/harness/scripted"
	"github.com/teamster-fleet/teamster/selection"
)

// Factory builds a harness implementation from its manifest and settings.
type Factory func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error)

// FactoryEnv is what a factory may use from the worker.
type FactoryEnv struct {
	// Ledger, when set, receives the scripted harness's start/end records.
	Ledger scripted.Ledger
}

var implementations = map[string]Factory{
	"scripted": func(m selection.Manifest, settings json.RawMessage, env FactoryEnv) (harness.Harness, error) {
		if len(settings) > 0 && string(settings) != "null" && string(settings) != "{}" {
			return nil, fmt.Errorf("scripted takes no settings")
		}
		return scripted.New(m, scripted.Options{Ledger: env.Ledger}), nil
	},
}

func implementationNames() string {
	names := make([]string, 0, len(implementations))
	for n := range implementations {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
