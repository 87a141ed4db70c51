package client_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/fleettest"
	"github.com/teamster-fleet/teamster/internal/testenv"
)

// The examples (example_test.go) run against one fleet started here, before
// the tests: natsURL is its NATS address, and gateway a client on it, as a
// gateway keeps one. The tests start fleets of their own.
var (
	natsURL string
	gateway *client.Client
)

// TestMain starts the examples' fleet, runs the tests and the examples,
// stops the fleet, and then (as testenv.Main does) fails the binary when
// the tests left a goroutine running.
func TestMain(m *testing.M) {
	stop, err := startExampleFleet()
	if err != nil {
		fmt.Fprintln(os.Stderr, "client: the examples' fleet did not start:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := testenv.CheckLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "client: the tests passed but left goroutines running:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startExampleFleet starts a one-worker fleet (fleettest) for the examples
// and connects gateway to it; stop closes the client and the connection and
// stops the fleet.
func startExampleFleet() (stop func(), err error) {
	tb := &mainTB{name: "examples"}
	started := make(chan *fleettest.Fleet)
	go func() {
		// A Fatal of the fleet's start ends this goroutine (runtime.Goexit,
		// as in a test): f stays nil.
		var f *fleettest.Fleet
		defer func() { started <- f }()
		f = fleettest.Start(tb, fleettest.Options{Workers: 1})
	}()
	f := <-started
	if f == nil {
		tb.cleanup()
		return nil, tb.err()
	}
	natsURL = f.NATS.URL()
	nc, err := nats.Connect(natsURL, nats.Name("examples"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.cleanup()
		return nil, err
	}
	if gateway, err = client.New(nc); err != nil {
		nc.Close()
		tb.cleanup()
		return nil, err
	}
	return func() {
		gateway.Close()
		nc.Close()
		tb.cleanup()
	}, nil
}

// mainTB is the testing.TB that fleettest gets from TestMain, where there
// is no *testing.T: its cleanups run when the examples' fleet stops, and a
// Fatal ends the calling goroutine as a test's Fatal does. It implements
// what fleettest and testenv call (Helper, Cleanup, TempDir, Log, Fatal,
// Error); any other method panics on the nil testing.TB it embeds.
type mainTB struct {
	testing.TB
	name string

	mu       sync.Mutex
	cleanups []func()
	dirs     []string
	errs     []error
}

func (tb *mainTB) Name() string { return tb.name }
func (tb *mainTB) Helper()      {}

func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.cleanups = append(tb.cleanups, f)
}

func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "teamster-client-examples-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.dirs = append(tb.dirs, dir)
	return dir
}

func (tb *mainTB) Log(args ...any)                 { fmt.Fprintln(os.Stderr, args...) }
func (tb *mainTB) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func (tb *mainTB) Error(args ...any) { tb.fail(errors.New(fmt.Sprint(args...))) }
func (tb *mainTB) Errorf(format string, args ...any) {
	tb.fail(fmt.Errorf(format, args...))
}

func (tb *mainTB) Fatal(args ...any) {
	tb.Error(args...)
	runtime.Goexit()
}

func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.Errorf(format, args...)
	runtime.Goexit()
}

func (tb *mainTB) Failed() bool { return tb.err() != nil }

func (tb *mainTB) fail(err error) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.errs = append(tb.errs, err)
}

func (tb *mainTB) err() error {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return errors.Join(tb.errs...)
}

// cleanup runs the cleanups, last registered first, then removes the temp
// dirs.
func (tb *mainTB) cleanup() {
	tb.mu.Lock()
	fs, dirs := tb.cleanups, tb.dirs
	tb.cleanups, tb.dirs = nil, nil
	tb.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
