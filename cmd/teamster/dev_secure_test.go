package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/sirupsen/logrus"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
	"github.com/teamster-fleet/teamster/internal/fleettest"
)

// secureLogin is one gateway's block of what `teamster dev --secure` prints.
type secureLogin struct{ seed, ca, inbox, submit string }

// parseSecureOutput reads the URL and each gateway's login from dev's
// output, as a test configuring itself from it would.
func parseSecureOutput(t *testing.T, out string) (url string, gateways map[string]secureLogin) {
	t.Helper()
	gateways = map[string]secureLogin{}
	var gw string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch {
		case strings.HasPrefix(line, "  gateway  "):
			gw = fields[1]
			gateways[gw] = secureLogin{}
			continue
		case !strings.HasPrefix(line, "    "):
			gw = ""
			continue
		}
		if fields[0] == "url" {
			url = fields[1]
		}
		if gw == "" {
			continue
		}
		l := gateways[gw]
		switch fields[0] {
		case "seed":
			l.seed = fields[1]
		case "ca":
			l.ca = fields[1]
		case "inbox":
			l.inbox = fields[1]
		case "submit":
			l.submit = fields[1]
		}
		gateways[gw] = l
	}
	return url, gateways
}

// `teamster dev --secure`: NATS with TLS and the production permissions. A
// gateway logging in with nothing but the files dev printed submits on its
// own subject, answers its own host's tool callback and gets the result;
// the anonymous teamster.submit is refused it, and a connection without an
// NKey, or without the CA, does not get in.
func TestDevSecureGateway(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx := context.Background()
	f, err := startDev(ctx, log, devOptions{natsPort: 0, workers: 2, secure: dir, gateways: []string{"gateway-1"}})
	if f != nil {
		t.Cleanup(f.stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := f.describe(&out, false); err != nil {
		t.Fatal(err)
	}
	url, gateways := parseSecureOutput(t, out.String())
	if !strings.HasPrefix(url, "tls://127.0.0.1:") || url != f.nats.ClientURL() {
		t.Fatalf("url %q, server %q\n%s", url, f.nats.ClientURL(), out.String())
	}
	want := map[string]secureLogin{
		"gateway-1": {seed: filepath.Join(dir, "nats", "gateway-gateway-1.nk"), ca: filepath.Join(dir, "tls", "ca.pem"),
			inbox: "_INBOX.gateway.gateway-1", submit: "teamster.submit.gateway.gateway-1"},
		"dev": {seed: filepath.Join(dir, "nats", "gateway-dev.nk"), ca: filepath.Join(dir, "tls", "ca.pem"),
			inbox: "_INBOX.gateway.dev", submit: "teamster.submit.gateway.dev"},
	}
	for id, w := range want {
		if gateways[id] != w {
			t.Errorf("gateway %s printed as %+v, want %+v\n%s", id, gateways[id], w, out.String())
		}
	}
	var info devSecureInfo
	if b, err := os.ReadFile(filepath.Join(dir, "dev.json")); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.NATSURL != url || len(info.Gateways) != 2 || info.Gateways[0].Seed != want["gateway-1"].seed {
		t.Errorf("dev.json: %+v", info)
	}
	if t.Failed() {
		t.FailNow()
	}

	g := gateways["gateway-1"]
	nkey, err := nats.NkeyOptionFromSeed(g.seed)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asyncErrs []error
	nc, err := nats.Connect(url, nkey, nats.RootCAs(g.ca), nats.CustomInboxPrefix(g.inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			asyncErrs = append(asyncErrs, err)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("gateway-1 logging in with %+v: %v", g, err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Its own host: the turn calls its echo tool through the fleet.
	if _, err := c.ServeHost("gateway-1", client.NewTools().Register("echo",
		func(_ context.Context, args json.RawMessage) (any, error) { return args, nil })); err != nil {
		t.Fatal(err)
	}

	a := fleettest.Attempt("agent:main:secure", fleettest.Script(`{"say":"calling"}`, `{"tool":{"name":"echo","args":{"x":1}}}`))
	a.Tools = []bus.Tool{{Name: "echo", Description: "returns its arguments"}}
	a.TimeoutMs = 20_000
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := c.SubmitAsGateway(sctx, "gateway-1", a)
	if err != nil {
		t.Fatalf("submit as gateway-1: %v", err)
	}
	defer h.Close()
	if h.Reply.Status != bus.StatusAccepted {
		t.Fatalf("reply %+v", h.Reply)
	}
	r, err := h.Result(sctx)
	if err != nil {
		t.Fatalf("result: %v", err)
	}
	if r.Status != teamster.StatusOK || !strings.Contains(strings.Join(r.AssistantTexts, " "), `"x":1`) {
		t.Fatalf("result %+v, want ok with the tool's answer", r)
	}

	// The anonymous submit subject is denied to a gateway: its publish
	// reaches no router, the request waits out its context, and the server
	// reports the violation on the connection.
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	if h, err := c.Submit(actx, fleettest.Attempt("agent:main:anonymous", "hi")); err == nil {
		h.Close()
		t.Fatalf("the anonymous teamster.submit was answered: %+v", h.Reply)
	} else {
		t.Logf("the anonymous submit: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !sawViolation(&mu, &asyncErrs, bus.SubjectSubmit) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !sawViolation(&mu, &asyncErrs, bus.SubjectSubmit) {
		t.Fatalf("no permissions violation for %s was reported (%v)", bus.SubjectSubmit, asyncErrs)
	}

	// No NKey: not authorized. No CA: the server's certificate is not trusted.
	if nc, err := nats.Connect(url, nats.RootCAs(g.ca)); err == nil {
		nc.Close()
		t.Error("a connection without an NKey got in")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("a connection without an NKey: %v, want an authorization violation", err)
	}
	if nc, err := nats.Connect(url, nkey); err == nil {
		nc.Close()
		t.Error("a connection that does not trust the CA got in")
	} else {
		t.Logf("without the CA: %v", err)
	}
}

func sawViolation(mu *sync.Mutex, errs *[]error, subject string) bool {
	mu.Lock()
	defer mu.Unlock()
	for _, err := range *errs {
		if s := err.Error(); strings.Contains(strings.ToLower(s), "permissions violation") && strings.Contains(s, `"`+subject+`"`) {
			return true
		}
	}
	return false
}

// `teamster dev --demo --secure DIR` plays the whole demo under the
// production permissions, its client the gateway "dev", and exits 0.
func TestDevSecureDemo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	common := &cmdutil.Common{LogLevel: "warn", LogFormat: "text"}
	var out bytes.Buffer
	err := runDev(context.Background(), &out, common, devOptions{natsPort: 0, workers: 2, demo: true, secure: dir,
		gateways: []string{"gateway-1"}})
	if err != nil {
		t.Fatalf("dev --demo --secure: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{"tls://127.0.0.1:", "gateway  dev (the sample host and the demo's client)",
		"submit      teamster.submit.gateway.dev", "demo: every attempt ended as expected"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}
