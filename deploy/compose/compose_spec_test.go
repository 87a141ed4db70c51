package compose

import (
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeSpec is the part of the Compose file format these tests read. Each
// field accepts the short and the long syntax Compose accepts, so that a
// rewrite in the other syntax is still checked rather than rejected.
type composeSpec struct {
	Name     string                     `yaml:"name"`
	Services map[string]*composeService `yaml:"services"`
	Volumes  map[string]any             `yaml:"volumes"`
}

type composeService struct {
	Image           string                     `yaml:"image"`
	Build           *composeBuild              `yaml:"build"`
	Command         stringList                 `yaml:"command"`
	Volumes         []composeMount             `yaml:"volumes"`
	Environment     environment                `yaml:"environment"`
	EnvFile         envFiles                   `yaml:"env_file"`
	DependsOn       dependsOn                  `yaml:"depends_on"`
	StopGracePeriod string                     `yaml:"stop_grace_period"`
	Ports           []string                   `yaml:"ports"`
	Healthcheck     *struct{ Test stringList } `yaml:"healthcheck"`
}

// composeBuild is `build: path` or `build: {context, dockerfile}`.
type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

// stringList is a list of strings, or one string split on spaces.
type stringList []string

func (l *stringList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = strings.Fields(n.Value)
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// composeMount is a volume or bind mount: "source:target[:mode]" or
// {type, source, target}.
type composeMount struct {
	Type     string `yaml:"type"`
	Source   string `yaml:"source"`
	Target   string `yaml:"target"`
	ReadOnly bool   `yaml:"read_only"`
}

func (m *composeMount) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		type plain composeMount
		return n.Decode((*plain)(m))
	}
	parts := strings.Split(n.Value, ":")
	switch len(parts) {
	case 1:
		m.Type, m.Target = "volume", parts[0] // anonymous volume
		return nil
	case 2, 3:
		m.Source, m.Target = parts[0], parts[1]
		if len(parts) == 3 {
			for _, o := range strings.Split(parts[2], ",") {
				m.ReadOnly = m.ReadOnly || o == "ro"
			}
		}
	default:
		return fmt.Errorf("volume %q: want source:target[:mode]", n.Value)
	}
	if isPath(m.Source) {
		m.Type = "bind"
	} else {
		m.Type = "volume"
	}
	return nil
}

// isPath says whether a short-syntax mount source is a host path rather than
// a named volume.
func isPath(s string) bool {
	return strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~")
}

// environment is a map, or a list of KEY=VALUE.
type environment map[string]string

func (e *environment) UnmarshalYAML(n *yaml.Node) error {
	*e = environment{}
	if n.Kind == yaml.SequenceNode {
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			(*e)[k] = v
		}
		return nil
	}
	var m map[string]string
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		(*e)[k] = v
	}
	return nil
}

// envFiles is one path, a list of paths, or a list of {path, required}.
type envFiles []string

func (f *envFiles) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*f = envFiles{n.Value}
		return nil
	case yaml.SequenceNode:
		for _, item := range n.Content {
			if item.Kind == yaml.ScalarNode {
				*f = append(*f, item.Value)
				continue
			}
			var long struct{ Path string }
			if err := item.Decode(&long); err != nil {
				return err
			}
			*f = append(*f, long.Path)
		}
		return nil
	}
	return fmt.Errorf("env_file: unexpected %v", n.Kind)
}

// dependsOn is a list of service names or a map of name to condition.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalYAML(n *yaml.Node) error {
	*d = dependsOn{}
	if n.Kind == yaml.SequenceNode {
		var l []string
		if err := n.Decode(&l); err != nil {
			return err
		}
		for _, s := range l {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var m map[string]struct{ Condition string }
	if err := n.Decode(&m); err != nil {
		return err
	}
	for k, v := range m {
		(*d)[k] = v.Condition
	}
	return nil
}

// loadCompose parses the shipped compose.yaml, failing the test loudly when
// it does not parse.
func loadCompose(t *testing.T) *composeSpec {
	t.Helper()
	b, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c composeSpec
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s does not parse: %v", composeFile, err)
	}
	if len(c.Services) == 0 {
		t.Fatalf("%s has no services", composeFile)
	}
	return &c
}

// role is what a service runs: nats, redis (a Redis data node), sentinel
// (a Redis Sentinel: a redis image running redis-server --sentinel), router
// or worker.
func (s *composeService) role() string {
	switch {
	case strings.HasPrefix(s.Image, "nats:"):
		return "nats"
	case strings.HasPrefix(s.Image, "redis:"):
		if args, _, err := s.redisServer(); err == nil && slices.Contains(args, "--sentinel") {
			return "sentinel"
		}
		return "redis"
	case s.Build != nil && len(s.Command) > 0:
		return path.Base(s.Command[0])
	case strings.HasPrefix(s.Image, "prom/prometheus:"):
		return "prometheus"
	case strings.HasPrefix(s.Image, "grafana/grafana:"):
		return "grafana"
	}
	return ""
}

func (c *composeSpec) byRole(role string) []string {
	var names []string
	for name, s := range c.Services {
		if s.role() == role {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// mountOf returns the local file bind-mounted at target in service s.
func (s *composeService) mountOf(target string) (string, bool) {
	m, ok := s.bindAt(target)
	return m.Source, ok
}

// bindAt returns the bind mount at target in service s.
func (s *composeService) bindAt(target string) (composeMount, bool) {
	for _, m := range s.Volumes {
		if m.Type == "bind" && m.Target == target {
			return m, true
		}
	}
	return composeMount{}, false
}
