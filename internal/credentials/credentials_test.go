package credentials

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// Generating again keeps every key and certificate and adds the new
// principal; the auth file loads into nats-server with one NKey user each.
func TestGenerateKeepsWhatExists(t *testing.T) {
	dir := t.TempDir()
	spec := ComposeSpec()
	l, err := Generate(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	gw := Principal{Role: RoleGateway, Name: "gateway-1"}
	seed1 := read(t, l.NKey(gw))
	ca1 := read(t, l.CA)
	cert1 := read(t, l.Cert("nats-1"))

	spec.Gateways = append(spec.Gateways, "gateway-2")
	l2, err := Generate(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if read(t, l2.NKey(gw)) != seed1 || read(t, l2.CA) != ca1 || read(t, l2.Cert("nats-1")) != cert1 {
		t.Fatal("a second run changed an existing seed, the CA or a certificate")
	}
	if _, err := os.Stat(l2.NKey(Principal{Role: RoleGateway, Name: "gateway-2"})); err != nil {
		t.Fatalf("the new gateway has no seed: %v", err)
	}
	if fi, err := os.Stat(l2.NKey(gw)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("seed mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	opts, err := server.ProcessConfigFile(l2.NATSAuth)
	if err != nil {
		t.Fatalf("auth.conf does not load: %v", err)
	}
	ps, _ := spec.Principals()
	if len(opts.Nkeys) != len(ps) {
		t.Fatalf("%d NKey users, want %d", len(opts.Nkeys), len(ps))
	}
	if b := read(t, l2.NATSAuth); strings.Contains(b, strings.TrimSpace(seed1)) || seedRe.MatchString(b) {
		t.Fatal("auth.conf holds a seed")
	}
}

// A name that cannot be a subject token, or one given twice, is refused
// before anything is written.
func TestSpecRefusesBadNames(t *testing.T) {
	for name, s := range map[string]Spec{
		"a dot":   {Gateways: []string{"gw.1"}},
		"a star":  {Workers: []string{"*"}},
		"twice":   {Routers: []string{"r1", "r1"}},
		"a host":  {NATSHosts: []string{"nats 1"}},
		"a blank": {Operators: []string{""}},
	} {
		dir := filepath.Join(t.TempDir(), "out")
		if _, err := Generate(dir, s); err == nil {
			t.Errorf("%s: generated", name)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: wrote %s", name, dir)
		}
	}
}

// seedRe is a user NKey seed.
var seedRe = regexp.MustCompile(`\bSU[A-Z2-7]{56}\b`)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
