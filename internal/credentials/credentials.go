// Package credentials generates a deployment's secrets: an NKey and NATS
// permissions per principal, a CA and the servers' TLS certificates, and a
// Redis ACL user per role. `teamster credentials` runs it; nothing it writes
// is committed. Running it again keeps every key, password and certificate
// it finds and adds what is missing, so adding a gateway is one more run with
// the gateway in the list.
package credentials

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/teamster-fleet/teamster/bus"
)

// Spec is who and what a deployment has.
type Spec struct {
	Gateways []string // gateway ids (each is also the gateway's hostId)
	// Delegates are <pluginId>@<gatewayId>: a delegate plugin bound to the
	// gateway (tenant) whose sessions it continues.
	Delegates []string
	Routers   []string // router ids (TEAMSTER_ROUTER_ID)
	// Workers are worker ids (the worker config's workerId), each with
	// the harness ids it hosts, <workerId>=<harnessId>+<harnessId>: its
	// permissions then reach only those harnesses' queues. A bare
	// <workerId> reaches every harness's.
	Workers   []string
	Operators []string // operators' names
	// NATSHosts and RedisHosts are the servers that get a certificate, each
	// valid for its own name (plus localhost and 127.0.0.1).
	NATSHosts  []string
	RedisHosts []string
	// RedisMaster is the name the Sentinels monitor the primary under
	// (their sentinel.conf logs in to it as the sentinel user).
	RedisMaster string
}

// ComposeSpec is the deployment of deploy/compose/compose.yaml.
func ComposeSpec() Spec {
	return Spec{
		Gateways:    []string{"gateway-1"},
		Delegates:   []string{"voice-call@gateway-1"},
		Routers:     []string{"router-1", "router-2"},
		Workers:     []string{"worker-1=codex+claude-cli", "worker-2=codex+claude-cli", "worker-3=codex+claude-cli"},
		Operators:   []string{"operator"},
		NATSHosts:   []string{"nats-1", "nats-2", "nats-3"},
		RedisHosts:  []string{"redis-1", "redis-2", "redis-3", "sentinel-1", "sentinel-2", "sentinel-3"},
		RedisMaster: "teamster",
	}
}

// Principals are the spec's NATS principals, in role order; a name that is
// not an identifier, or one given twice for a role, is an error.
func (s Spec) Principals() ([]Principal, error) {
	var out []Principal
	for _, r := range []struct {
		role  string
		names []string
	}{
		{RoleRouter, s.Routers}, {RoleWorker, s.Workers}, {RoleGateway, s.Gateways},
		{RoleDelegate, s.Delegates}, {RoleOperator, s.Operators},
	} {
		seen := map[string]bool{}
		for _, n := range r.names {
			p := Principal{Role: r.role, Name: n}
			if name, hs, ok := strings.Cut(n, "="); r.role == RoleWorker && ok {
				p.Name, p.Harnesses = name, strings.Split(hs, "+")
				for _, id := range p.Harnesses {
					if err := bus.CheckID("worker "+name+"'s harness", id); err != nil {
						return nil, err
					}
				}
			}
			if r.role == RoleDelegate {
				var ok bool
				if p.Name, p.Gateway, ok = strings.Cut(n, "@"); !ok {
					return nil, fmt.Errorf("delegate %q is not <pluginId>@<gatewayId>: a delegate is bound to the gateway whose sessions it continues", n)
				}
				if err := bus.CheckID("delegate's gateway", p.Gateway); err != nil {
					return nil, err
				}
			}
			if err := bus.CheckID(r.role, p.Name); err != nil {
				return nil, err
			}
			if seen[p.ID()] {
				return nil, fmt.Errorf("%s %q is named twice", r.role, n)
			}
			seen[p.ID()] = true
			out = append(out, p)
		}
	}
	for _, h := range append(append([]string{}, s.NATSHosts...), s.RedisHosts...) {
		if err := bus.CheckID("host", h); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Layout is where Generate put things, under its directory.
type Layout struct {
	Dir string
	// NATSAuth is nats/auth.conf; NKey(p) a principal's seed file.
	NATSAuth string
	// CA is tls/ca.pem; Cert(h) and Key(h) a server's certificate and key.
	CA string
	// Redis is redis/: the ACL users' files and each daemon role's
	// password file.
	Redis *RedisACL
}

// NKey is the seed file principal p logs in with.
func (l *Layout) NKey(p Principal) string { return filepath.Join(l.Dir, "nats", p.ID()+".nk") }

// Cert and Key are host's certificate and key.
func (l *Layout) Cert(host string) string { return filepath.Join(l.Dir, "tls", host+".pem") }
func (l *Layout) Key(host string) string  { return filepath.Join(l.Dir, "tls", host+"-key.pem") }

// Generate writes what the spec needs into dir and is missing there:
// dir/nats (auth.conf and a seed per principal), dir/tls (the CA, its key,
// and a certificate per host), dir/redis (EnsureRedisACL: the ACL users, the
// servers' includes, each daemon role's password). dir is created 0700; an
// existing dir that others may enter is refused, since the files that
// containers read are 0644 (writeMounted) and only dir keeps them private.
func Generate(dir string, s Spec) (*Layout, error) {
	principals, err := s.Principals()
	if err != nil {
		return nil, err
	}
	if s.RedisMaster == "" {
		s.RedisMaster = ComposeSpec().RedisMaster
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, err
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s is mode %04o: other users may enter it and read the keys in it; chmod 700 %s, or give a new directory", dir, fi.Mode().Perm(), dir)
	}
	l := &Layout{Dir: dir}
	if l.NATSAuth, err = EnsureNATS(filepath.Join(dir, "nats"), principals); err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	tlsDir := filepath.Join(dir, "tls")
	ca, err := EnsureCA(tlsDir)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	l.CA = ca.CertFile
	for _, h := range append(append([]string{}, s.NATSHosts...), s.RedisHosts...) {
		if _, _, err := ca.EnsureServer(tlsDir, h, []string{h}); err != nil {
			return nil, fmt.Errorf("tls: %s: %w", h, err)
		}
	}
	if l.Redis, err = EnsureRedisACL(filepath.Join(dir, "redis"), s.RedisMaster, nil); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return l, nil
}
