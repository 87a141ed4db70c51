package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/leases"
	"github.com/teamster-fleet/teamster/router"
	"github.com/teamster-fleet/teamster/selection"
	"github.com/teamster-fleet/teamster/worker"
)

// cli runs the teamster CLI against f's NATS and Redis and returns its
// combined output and exit status.
func cli(t *testing.T, f *fleettest.Fleet, args ...string) (string, int) {
	t.Helper()
	return runCLI(t, f.NATS.URL(), append(args, "--redis-url", f.Redis.URL())...)
}

// jsonOut decodes a command's -o json output into v, failing the test with
// the output when it does not decode.
func jsonOut(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(firstLine(out)), v); err != nil {
		t.Fatalf("output is not the JSON asked for: %v\n%s", err, out)
	}
}

func mustRFC3339(t *testing.T, field, v string) {
	t.Helper()
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		t.Errorf("%s %q is not an RFC 3339 time: %v", field, v, err)
	}
}

type attemptJSON struct {
	AttemptID   string `json:"attemptId"`
	SessionTag  string `json:"sessionTag"`
	SessionKey  string `json:"sessionKey"`
	State       string `json:"state"`
	HarnessID   string `json:"harnessId"`
	WorkerID    string `json:"workerId"`
	Fence       string `json:"fence"`
	Status      string `json:"status"`
	AcceptedAt  string `json:"acceptedAt"`
	ClaimedAt   string `json:"claimedAt"`
	FinishedAt  string `json:"finishedAt"`
	PublishedAt string `json:"publishedAt"`
	QueueWaitMs *int64 `json:"queueWaitMs"`
}

// The inspection commands against a real fleet: one session with a turn
// running and two waiting behind it, another with a finished turn. Each
// command is checked for what it prints and its exit status, in both output
// formats, and for the unknown ids and bad input an operator will type.
func TestCLIInspectsTheFleet(t *testing.T) {
	t.Parallel() // its own fleet and servers
	f := fleettest.Start(t, fleettest.Options{Workers: 2, Metrics: true})
	busy, done := "agent:main:cli-busy", "agent:main:cli-done"
	finished := fleettest.Submit(t, f.Client, fleettest.Attempt(done, "hello"))
	if r := fleettest.Result(t, finished); r.Status != "ok" {
		t.Fatalf("the finished session's turn: %+v", r)
	}
	running := fleettest.Submit(t, f.Client, fleettest.Attempt(busy, fleettest.Script(`{"sleep":20000}`)))
	fleettest.WaitEvent(t, running, bus.EventClaimed)
	var queued []string
	for i := 0; i < 2; i++ {
		h := fleettest.Submit(t, f.Client, fleettest.Attempt(busy, fmt.Sprintf("later %d", i)))
		queued = append(queued, h.AttemptID())
	}
	busyTag := leases.Tag(busy)

	t.Run("attempts ls", func(t *testing.T) {
		out, code := cli(t, f, "attempts", "ls")
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(running.AttemptID() + `\s+running\s+-\s+` + busyTag + `\s+codex\s+w\d`),
			regexp.MustCompile(queued[0] + `\s+queued\s+-\s+` + busyTag),
			regexp.MustCompile(queued[1] + `\s+queued\s+-\s+` + busyTag),
			regexp.MustCompile(finished.AttemptID() + `\s+finished\s+ok\s+` + leases.Tag(done)),
		} {
			if !want.MatchString(out) {
				t.Errorf("no line matching %s in:\n%s", want, out)
			}
		}
		out, code = cli(t, f, "attempts", "ls", "--state", "queued", "-o", "json")
		var list []attemptJSON
		jsonOut(t, out, &list)
		if code != 0 || len(list) != 2 {
			t.Fatalf("--state queued: exit %d, %d attempts, want 2:\n%s", code, len(list), out)
		}
		for _, a := range list {
			if a.State != "queued" || !slices.Contains(queued, a.AttemptID) || a.SessionKey != busy || a.SessionTag != busyTag {
				t.Errorf("queued attempt %+v", a)
			}
			mustRFC3339(t, "acceptedAt", a.AcceptedAt)
		}
		out, _ = cli(t, f, "attempts", "ls", "--session", busy, "--state", "running", "-o", "json")
		jsonOut(t, out, &list)
		if len(list) != 1 || list[0].AttemptID != running.AttemptID() || list[0].WorkerID == "" {
			t.Errorf("--session --state running: %+v", list)
		}
		out, _ = cli(t, f, "attempts", "ls", "--state", "finished", "-o", "json")
		jsonOut(t, out, &list)
		if len(list) != 1 || list[0].AttemptID != finished.AttemptID() || list[0].Status != "ok" {
			t.Errorf("--state finished: %+v", list)
		}
		if out, code := cli(t, f, "attempts", "ls", "--state", "bogus"); code != 1 || !strings.Contains(out, "want queued, running, finished or all") {
			t.Errorf("--state bogus: exit %d:\n%s", code, out)
		}
		if out, code := cli(t, f, "attempts"); code != 1 || !strings.Contains(out, "needs a subcommand: ls") {
			t.Errorf("attempts alone: exit %d:\n%s", code, out)
		}
	})

	t.Run("attempt show", func(t *testing.T) {
		out, code := cli(t, f, "attempt", "show", running.AttemptID(), "-o", "json")
		var a attemptJSON
		jsonOut(t, out, &a)
		if code != 0 || a.State != "running" || a.WorkerID == "" || a.Fence == "" || a.SessionKey != busy || a.QueueWaitMs == nil {
			t.Errorf("running attempt: exit %d, %+v", code, a)
		}
		mustRFC3339(t, "claimedAt", a.ClaimedAt)
		out, code = cli(t, f, "attempt", "show", finished.AttemptID())
		for _, want := range []string{"state         finished", "outcome       ok", "published", "by its worker", `result     ok  "hello"`} {
			if !strings.Contains(out, want) {
				t.Errorf("finished attempt: no %q in:\n%s", want, out)
			}
		}
		if code != 0 {
			t.Errorf("finished attempt: exit %d", code)
		}
		out, code = cli(t, f, "attempt", "show", "NO-SUCH-ATTEMPT")
		if code != 1 || !strings.Contains(out, "no attempt NO-SUCH-ATTEMPT in Redis") || strings.Count(out, "NO-SUCH-ATTEMPT") != 1 {
			t.Errorf("unknown id: exit %d (want 1, the error once):\n%s", code, out)
		}
		if out, code := cli(t, f, "attempt", "show", "not/an/id"); code != 1 || !strings.Contains(out, "attemptId") {
			t.Errorf("invalid id: exit %d:\n%s", code, out)
		}
	})

	t.Run("session show", func(t *testing.T) {
		out, code := cli(t, f, "session", "show", busy)
		for _, want := range []string{busyTag, `"` + busy + `"`, "holds it for " + running.AttemptID(), "3 attempts (1 running, 2 queued)"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, out)
			}
		}
		if code != 0 {
			t.Errorf("exit %d", code)
		}
		out, code = cli(t, f, "session", "show", busyTag, "-o", "json")
		var s struct {
			SessionKey string   `json:"sessionKey"`
			Order      []string `json:"order"`
			Running    int      `json:"running"`
			Queued     int      `json:"queued"`
			Lease      *struct {
				Holder    string `json:"holder"`
				AttemptID string `json:"attemptId"`
				TTLMs     int64  `json:"ttlMs"`
			} `json:"lease"`
		}
		jsonOut(t, out, &s)
		if code != 0 || s.SessionKey != busy || s.Running != 1 || s.Queued != 2 || s.Lease == nil ||
			s.Lease.AttemptID != running.AttemptID() || s.Lease.TTLMs <= 0 || !slices.Equal(s.Order, append([]string{running.AttemptID()}, queued...)) {
			t.Errorf("by tag: exit %d, %+v", code, s)
		}
		out, code = cli(t, f, "session", "show", done)
		if code != 0 || !regexp.MustCompile(`session id\s+sid-`+done).MatchString(out) || !regexp.MustCompile(`lease\s+none`).MatchString(out) {
			t.Errorf("finished session (record, no lease): exit %d:\n%s", code, out)
		}
		if out, code := cli(t, f, "session", "show", "agent:main:nobody"); code != 1 || !strings.Contains(out, "no session "+leases.Tag("agent:main:nobody")) {
			t.Errorf("unknown session: exit %d:\n%s", code, out)
		}
		if out, code := cli(t, f, "session", "delete", "agent:main:nobody"); code != 1 || !strings.Contains(out, "has no record: nothing to delete") {
			t.Errorf("delete of an unknown session: exit %d:\n%s", code, out)
		}
		if out, code := cli(t, f, "session", "frobnicate", busy); code != 1 || !strings.Contains(out, `unknown command "frobnicate"`) {
			t.Errorf("unknown subcommand: exit %d:\n%s", code, out)
		}
	})

	t.Run("sessions ls", func(t *testing.T) {
		out, code := cli(t, f, "sessions", "ls")
		if code != 0 || !regexp.MustCompile(busyTag+`\s+`+busy+`\s+1\s+2\s+0\s+w\d`).MatchString(out) {
			t.Errorf("exit %d:\n%s", code, out)
		}
		if strings.Contains(out, leases.Tag(done)) {
			t.Errorf("lists a session with nothing in flight:\n%s", out)
		}
	})

	t.Run("status", func(t *testing.T) {
		out, code := cli(t, f, "status", "-o", "json")
		var st struct {
			Routers []struct {
				ID           string `json:"routerId"`
				PolicyDigest string `json:"policyDigest"`
				StartedAt    string `json:"startedAt"`
				UptimeMs     int64  `json:"uptimeMs"`
			} `json:"routers"`
			Workers []struct {
				ID       string   `json:"workerId"`
				Running  []string `json:"running"`
				Answered bool     `json:"answered"`
				Slots    int      `json:"slots"`
			} `json:"workers"`
			Queues []struct {
				Harness     string `json:"harness"`
				Waiting     int    `json:"waiting"`
				Undelivered int    `json:"undelivered"`
				Held        int    `json:"held"`
			} `json:"queues"`
			InFlight *int64   `json:"inFlight"`
			Policies int      `json:"policies"`
			Errors   []string `json:"errors"`
		}
		jsonOut(t, out, &st)
		if code != 0 || len(st.Errors) > 0 {
			t.Fatalf("exit %d, errors %v", code, st.Errors)
		}
		if len(st.Routers) != 1 || st.Routers[0].ID != f.Router.ID() || st.Routers[0].PolicyDigest != (*selection.Policy)(nil).Digest() || st.Policies != 1 {
			t.Errorf("routers %+v, %d policies", st.Routers, st.Policies)
		}
		mustRFC3339(t, "startedAt", st.Routers[0].StartedAt)
		runningOn := map[string]int{}
		for _, w := range st.Workers {
			if !w.Answered || w.Slots != 64 {
				t.Errorf("worker %+v", w)
			}
			runningOn[w.ID] = len(w.Running)
		}
		if len(st.Workers) != 2 || runningOn["w1"]+runningOn["w2"] != 1 {
			t.Errorf("workers %+v, want 2 with one attempt running between them", st.Workers)
		}
		for _, q := range st.Queues {
			if q.Harness == "codex" && (q.Waiting != 2 || q.Undelivered+q.Held != 2) {
				t.Errorf("codex queue %+v, want the 2 turns waiting behind the running one", q)
			}
		}
		if st.InFlight == nil || *st.InFlight != 3 {
			t.Errorf("in flight %v, want 3", st.InFlight)
		}
		if out, code := cli(t, f, "status", "-o", "yaml"); code != 1 || !strings.Contains(out, `--output "yaml": want table or json`) {
			t.Errorf("-o yaml: exit %d:\n%s", code, out)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// Slots count runs: 1 on the worker running the busy turn, 0 on
		// the other; the queue figure comes from the one router.
		// The gauge is refreshed with each heartbeat (every 2 s).
		var used []float64
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			used = used[:0]
			for _, w := range []string{"w1", "w2"} {
				used = append(used, scrape(t, f.MetricsURL[w], "teamster_worker_slots_used", nil))
			}
			slices.Sort(used)
			if slices.Equal(used, []float64{0, 1}) {
				break
			}
		}
		if !slices.Equal(used, []float64{0, 1}) {
			t.Errorf("slots used %v, want 0 and 1", used)
		}
		waitGauge(t, f.MetricsURL["router"], "teamster_queue_attempts", map[string]string{"harness": "codex", "state": "held"}, 2)
		waitGauge(t, f.MetricsURL["router"], "teamster_queue_attempts", map[string]string{"harness": "codex", "state": "undelivered"}, 0)
	})

	t.Run("explain", func(t *testing.T) {
		dir := t.TempDir()
		attempt, policy := filepath.Join(dir, "attempt.json"), filepath.Join(dir, "policy.json")
		b, _ := json.Marshal(fleettest.Attempt("agent:main:explain", "hi"))
		if err := os.WriteFile(attempt, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(policy, []byte(`{"models":{"providers":{"openai":{"agentRuntime":{"id":"codex"}}}}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := cli(t, f, "explain", "-f", attempt, "-o", "json")
		var v struct {
			Selection selection.Record `json:"selection"`
			Notes     []string         `json:"notes"`
		}
		jsonOut(t, out, &v)
		if code != 0 || v.Selection.SelectedHarnessID != "codex" || len(v.Notes) != 0 {
			t.Errorf("explain with the routers' policy: exit %d, %+v", code, v)
		}
		out, code = cli(t, f, "explain", "-f", attempt, "--config", policy)
		if code != 0 || !strings.Contains(out, "warning    the routers run runtime policy "+(*selection.Policy)(nil).Digest()+", not this one") {
			t.Errorf("explain with another policy than the routers': exit %d:\n%s", code, out)
		}
	})

	t.Run("bad JSON", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.json")
		if err := os.WriteFile(path, []byte("{\"v\": 1,\n  \"sessionKey\": }"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := cli(t, f, "submit", "-f", path)
		if code != 1 || !strings.Contains(out, path+":2:17: not a prepared attempt: invalid character '}'") || strings.Count(out, "invalid character") != 1 {
			t.Errorf("exit %d (want 1, the position, the error once):\n%s", code, out)
		}
	})
}

// waitGauge waits until the metric at base has value want (the router's
// heartbeat refreshes the queue figures every 2 s).
func waitGauge(t *testing.T, base, name string, labels map[string]string, want float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if got = scrape(t, base, name, labels); got == want {
			return
		}
	}
	t.Errorf("%s%v at %s is %v, want %v", name, labels, base, got, want)
}

// What operators meet when parts of the fleet fail: a worker that does not
// answer (SIGSTOP), routers running different policies, Redis down. Each
// command says what failed, once, blames nothing else, and exits 1.
func TestCLIReportsFailures(t *testing.T) {
	t.Parallel() // its own fleet and servers
	f := fleettest.Start(t, fleettest.Options{Workers: 1, Metrics: true})

	// A worker process, stopped with SIGSTOP once it registered.
	dir := t.TempDir()
	cfg := worker.DevConfig("stopped", 8)
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "worker.json")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wp := start(t, "testworker", "--nats-url", f.NATS.URL(), "--redis-url", f.Redis.URL(), "--config", cfgPath)
	f.WaitRegistered(2)
	if err := wp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wp.cmd.Process.Signal(syscall.SIGCONT) })

	t.Run("status with a stopped worker", func(t *testing.T) {
		out, code := cli(t, f, "status")
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		if !strings.Contains(out, "worker stopped (its control subject)") || !strings.Contains(out, "[no answer; from its heartbeat]") {
			t.Errorf("the stopped worker is not named:\n%s", out)
		}
		for _, innocent := range []string{"attempts stream", "Redis", "registry"} {
			if strings.Contains(out, innocent+":") || strings.Contains(out, innocent+" (") {
				t.Errorf("blames %s, which answered:\n%s", innocent, out)
			}
		}
		if !regexp.MustCompile(`w1\s+active\s+claude-cli,codex\s+0/64\s`).MatchString(out) {
			t.Errorf("the healthy worker is not shown as it is:\n%s", out)
		}
	})

	t.Run("drain of a stopped worker", func(t *testing.T) {
		start := time.Now()
		out, code := cli(t, f, "drain", "stopped")
		if code != 1 || !strings.Contains(out, "drain stopped: no answer within 10s") {
			t.Errorf("exit %d:\n%s", code, out)
		}
		// A liveness bound, not a timing goal: the request's own timeout
		// ends it, not the 30-minute --timeout of --wait.
		if took := time.Since(start); took > time.Minute {
			t.Errorf("took %s", took)
		}
		if out, code := cli(t, f, "drain", "no-such-worker"); code != 1 || !strings.Contains(out, "the worker is not running") {
			t.Errorf("drain of an unknown worker: exit %d:\n%s", code, out)
		}
	})

	t.Run("routers with different policies", func(t *testing.T) {
		policy, err := selection.ParsePolicy("other.json", []byte(`{"models":{"providers":{"openai":{"agentRuntime":{"id":"claude-cli"}}}}}`))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := router.New(router.Params{NATS: f.Connect("router-2"), Redis: f.RDB, Policy: policy, RouterID: "r-second", Logger: f.Log})
		if err != nil {
			t.Fatal(err)
		}
		if err := r2.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer r2.Stop()
		out, code := cli(t, f, "status")
		if code != 1 || !strings.Contains(out, "POLICY MISMATCH: the routers run 2 different runtime policies") ||
			!strings.Contains(out, "r-second") || !strings.Contains(out, policy.Digest()) {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})

	t.Run("Redis down", func(t *testing.T) {
		if err := f.Redis.Stop(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.Redis.Start(); err != nil {
				t.Fatal(err)
			}
		}()
		for _, args := range [][]string{{"status"}, {"attempts", "ls"}, {"sessions", "ls"}, {"session", "show", "agent:main:x"}, {"attempt", "show", "A1"}} {
			out, code := cli(t, f, args...)
			if code != 1 || !strings.Contains(out, "connect to Redis (standalone mode, at "+f.Redis.Addr()+")") {
				t.Errorf("%v: exit %d, want 1 naming Redis and its address:\n%s", args, code, out)
			}
			if strings.Contains(out, "pool.go") || strings.Count(out, "connection refused") != 1 {
				t.Errorf("%v: go-redis's own lines, or the error more than once:\n%s", args, out)
			}
		}
	})
}
