package gopool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitGoroutines waits until at most n goroutines run, or fails after 5 s.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still running, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeAndWait closes p and waits for its goroutines to end, so that the
// next test counts only its own.
func closeAndWait(t *testing.T, p *Pool, base int) {
	p.Close()
	waitGoroutines(t, base)
}

func TestGoRunsEveryFunction(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(time.Minute)
	defer closeAndWait(t, p, base)
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			ran.Add(1)
		})
	}
	wg.Wait()
	if got := ran.Load(); got != 1000 {
		t.Fatalf("%d functions ran, want 1000", got)
	}
}

// A goroutine that finished its function waits for the next one instead of
// ending: the pool's hand-off is taken (which only a waiting goroutine can
// do; Go would otherwise start a new one).
func TestAFinishedGoroutineIsReused(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(time.Minute)
	defer closeAndWait(t, p, base)
	done := make(chan struct{})
	p.Go(func() { close(done) })
	<-done
	again := make(chan struct{})
	select {
	case p.work <- func() { close(again) }:
	case <-time.After(5 * time.Second):
		t.Fatal("no goroutine of the pool took the next function")
	}
	<-again
}

func TestIdleGoroutinesEnd(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(50 * time.Millisecond)
	defer closeAndWait(t, p, base)
	release := runBlocked(p, 8)
	if n := runtime.NumGoroutine(); n < base+8 {
		t.Fatalf("%d goroutines with 8 functions blocked, want at least %d", n, base+8)
	}
	release()
	waitGoroutines(t, base)
}

// runBlocked runs n functions on p that block until release is called; it
// returns once they have all returned. All n run at once: n goroutines.
func runBlocked(p *Pool, n int) (release func()) {
	var wg sync.WaitGroup
	ch := make(chan struct{})
	for range n {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			<-ch
		})
	}
	return func() {
		close(ch)
		wg.Wait()
	}
}

func TestCloseEndsIdleGoroutinesAndGoStillRuns(t *testing.T) {
	base := runtime.NumGoroutine()
	p := New(time.Hour)
	runBlocked(p, 4)()
	p.Close()
	p.Close() // idempotent
	waitGoroutines(t, base)

	done := make(chan struct{})
	p.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Go after Close did not run its function")
	}
	waitGoroutines(t, base)
}
