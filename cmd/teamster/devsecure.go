package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/credentials"
)

// devNATSHost is the one NATS host of `teamster dev --secure`: its
// certificate is valid for localhost and 127.0.0.1.
const devNATSHost = "localhost"

// devRouterID is the router's id, and its principal's name, under --secure.
const devRouterID = "router"

// devSecure is `teamster dev --secure DIR`: the credentials generated in
// DIR, which the embedded NATS server enforces (the accounts and NKey users
// of DIR/nats/auth.conf, TLS with DIR/tls/localhost.pem) and every daemon of
// the fleet logs in with.
type devSecure struct {
	layout *credentials.Layout
	// gateways are the gateway ids: --gateways, then devHostID (the sample
	// host, which answers host callbacks for "dev", and the demo's client).
	gateways []string
	// logins are the connect options of each principal, by its ID.
	logins map[string][]nats.Option
}

// devSpec is the deployment dev --secure generates credentials for.
func devSpec(gateways, workers []string) credentials.Spec {
	gws := slices.Clone(gateways)
	if !slices.Contains(gws, devHostID) {
		gws = append(gws, devHostID)
	}
	return credentials.Spec{
		Gateways:  gws,
		Delegates: []string{"voice-call@" + devHostID},
		Routers:   []string{devRouterID},
		Workers:   workers,
		Operators: []string{devSecureOperator.Name},
		NATSHosts: []string{devNATSHost},
	}
}

// newDevSecure generates (or completes) the credentials in dir for the dev
// fleet of these gateways and workers and reads every principal's login.
func newDevSecure(dir string, gateways, workers []string) (*devSecure, error) {
	spec := devSpec(gateways, workers)
	l, err := credentials.Generate(dir, spec)
	if err != nil {
		return nil, fmt.Errorf("--secure %s: %w", dir, err)
	}
	ps, err := spec.Principals()
	if err != nil {
		return nil, err
	}
	s := &devSecure{layout: l, gateways: spec.Gateways, logins: map[string][]nats.Option{}}
	for _, p := range ps {
		nkey, err := nats.NkeyOptionFromSeed(l.NKey(p))
		if err != nil {
			return nil, fmt.Errorf("--secure: %s: %w", p.ID(), err)
		}
		s.logins[p.ID()] = []nats.Option{nkey, nats.RootCAs(l.CA), nats.CustomInboxPrefix(p.InboxPrefix())}
	}
	return s, nil
}

// login is the connect options of the principal of role and name (the
// fleet's Options.Principal); one the credentials do not have fails to
// connect, saying so.
func (s *devSecure) login(role, name string) []nats.Option {
	p := credentials.Principal{Role: role, Name: name}
	if o, ok := s.logins[p.ID()]; ok {
		return o
	}
	return []nats.Option{func(*nats.Options) error {
		return fmt.Errorf("teamster dev --secure: no credentials for %s", p.ID())
	}}
}

// configureNATS is the embedded server's security: the accounts and users of
// auth.conf, and TLS with the localhost certificate (clients need no
// certificate of their own: they log in with their NKeys).
func (s *devSecure) configureNATS() (func(*server.Options), error) {
	auth, err := server.ProcessConfigFile(s.layout.NATSAuth)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.layout.NATSAuth, err)
	}
	const tlsTimeout = 2 // seconds
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: s.layout.Cert(devNATSHost), KeyFile: s.layout.Key(devNATSHost), CaFile: s.layout.CA, Timeout: tlsTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("--secure: TLS: %w", err)
	}
	return func(o *server.Options) {
		o.Accounts = auth.Accounts
		o.Nkeys = auth.Nkeys
		o.Users = auth.Users
		o.TLS = true
		o.TLSConfig = tc
		o.TLSTimeout = tlsTimeout
	}, nil
}

// devGatewayLogin is what a gateway of the secure dev fleet logs in with, as
// dev prints it and writes it to DIR/dev.json.
type devGatewayLogin struct {
	ID            string `json:"id"`
	Seed          string `json:"seed"`
	CA            string `json:"ca"`
	InboxPrefix   string `json:"inboxPrefix"`
	SubmitSubject string `json:"submitSubject"`
}

// devSecureInfo is DIR/dev.json: where the running secure dev fleet is and
// how its gateways and operator log in, for tests that configure themselves
// from it (the OpenClaw plugin's end-to-end tests).
type devSecureInfo struct {
	Dir      string            `json:"dir"`
	NATSURL  string            `json:"natsUrl"`
	CA       string            `json:"ca"`
	RedisURL string            `json:"redisUrl"`
	Gateways []devGatewayLogin `json:"gateways"`
	Operator devGatewayLogin   `json:"operator"` // no submit subject
}

func (s *devSecure) info(natsURL, redisURL string) devSecureInfo {
	in := devSecureInfo{Dir: s.layout.Dir, NATSURL: natsURL, CA: s.layout.CA, RedisURL: redisURL}
	for _, g := range s.gateways {
		p := credentials.Principal{Role: credentials.RoleGateway, Name: g}
		subj, _ := bus.SubmitGatewaySubject(g)
		in.Gateways = append(in.Gateways, devGatewayLogin{ID: g, Seed: s.layout.NKey(p), CA: s.layout.CA,
			InboxPrefix: p.InboxPrefix(), SubmitSubject: subj})
	}
	op := devSecureOperator
	in.Operator = devGatewayLogin{ID: op.Name, Seed: s.layout.NKey(op), CA: s.layout.CA, InboxPrefix: op.InboxPrefix()}
	return in
}

// writeInfo writes DIR/dev.json.
func (s *devSecure) writeInfo(in devSecureInfo) (string, error) {
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.layout.Dir, "dev.json")
	return path, os.WriteFile(path, append(b, '\n'), 0o644)
}

// print shows the credentials and each gateway's login.
func (in devSecureInfo) print(out io.Writer, infoFile string) {
	fmt.Fprintf(out, "  secure   NATS with TLS and the production permissions (Redis: no TLS, no ACL users)\n")
	fmt.Fprintf(out, "    credentials %s\n", in.Dir)
	fmt.Fprintf(out, "    url         %s\n", in.NATSURL)
	fmt.Fprintf(out, "    ca          %s\n", in.CA)
	fmt.Fprintf(out, "    info        %s\n", infoFile)
	for _, g := range in.Gateways {
		note := ""
		if g.ID == devHostID {
			note = " (the sample host and the demo's client)"
		}
		fmt.Fprintf(out, "  gateway  %s%s\n", g.ID, note)
		fmt.Fprintf(out, "    seed        %s\n", g.Seed)
		fmt.Fprintf(out, "    ca          %s\n", g.CA)
		fmt.Fprintf(out, "    inbox       %s\n", g.InboxPrefix)
		fmt.Fprintf(out, "    submit      %s\n", g.SubmitSubject)
	}
	fmt.Fprintf(out, "  operator %s\n", in.Operator.ID)
	fmt.Fprintf(out, "    seed        %s\n", in.Operator.Seed)
	fmt.Fprintf(out, "    inbox       %s\n", in.Operator.InboxPrefix)
	fmt.Fprintln(out)
}

// devSecureOperator is the operator principal dev --secure makes.
var devSecureOperator = credentials.Principal{Role: credentials.RoleOperator, Name: "operator"}
