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
	dir := filepath.Join(t.TempDir(), "secrets")
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
	// Files a container reads are 0644 (its user is not their owner); the
	// directory, 0700, keeps them from the host's other users.
	for _, f := range []string{l2.NKey(gw), l2.Key("nats-1"), l2.Redis.DaemonPasswordFile(RedisWorker), l2.Redis.ACLFile} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o644 {
			t.Fatalf("%s: mode %v (%v), want 0644", f, fi.Mode().Perm(), err)
		}
	}
	for _, f := range []string{filepath.Join(dir, "tls", "ca-key.pem"), l2.Redis.PasswordFile, l2.Redis.HealthcheckEnv} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v (%v), want 0600: only the host reads it", f, fi.Mode().Perm(), err)
		}
	}
	for _, d := range []string{dir, filepath.Join(dir, "nats"), filepath.Join(dir, "tls"), filepath.Join(dir, "redis")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: mode %v (%v), want 0700", d, fi.Mode().Perm(), err)
		}
	}
	// Each daemon role's password file holds its password.
	for _, r := range []RedisRole{RedisRouter, RedisWorker, RedisOperator} {
		p, _ := l2.Redis.Principal(r)
		if got := strings.TrimSpace(read(t, l2.Redis.DaemonPasswordFile(r))); got != p.Password || got == "" {
			t.Fatalf("%s's password file does not hold its password", r)
		}
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

// A directory that other users may enter is refused, before anything is
// written into it.
func TestGenerateRefusesAnOpenDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Generate(dir, ComposeSpec())
	if err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("Generate into a 0755 directory: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("it wrote %d entries", len(ents))
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
