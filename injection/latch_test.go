package injection

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestLatchNeverRecovers(t *testing.T) {
	for _, tc := range []struct {
		name string
		fall func(t *testing.T, l *Latch, ok *atomic.Bool)
	}{
		{"check false", func(t *testing.T, l *Latch, ok *atomic.Bool) {
			ok.Store(false)
			if l.Current() {
				t.Fatal("Current() = true with the check false")
			}
		}},
		{"revoked", func(t *testing.T, l *Latch, ok *atomic.Bool) { l.Revoke() }},
		{"revoked twice", func(t *testing.T, l *Latch, ok *atomic.Bool) { l.Revoke(); l.Revoke() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ok atomic.Bool
			ok.Store(true)
			l := NewLatch(ok.Load)
			assert := l.Assert()
			if !l.Current() || !assert() {
				t.Fatal("latch false before it fell")
			}
			tc.fall(t, l, &ok)
			ok.Store(true)
			for range 3 {
				if l.Current() || assert() {
					t.Fatal("latch true again after it fell")
				}
			}
		})
	}
}

func TestLatchNeverRecoversUnderConcurrentCalls(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		name := "check flips"
		if revoke {
			name = "revoked"
		}
		t.Run(name, func(t *testing.T) {
			var ok, fell atomic.Bool
			ok.Store(true)
			l := NewLatch(ok.Load)
			stop := make(chan struct{})
			var flipper sync.WaitGroup
			flipper.Add(1)
			go func() {
				defer flipper.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if revoke && i == 1000 {
						l.Revoke()
					}
					if !revoke {
						ok.Store(i%2 == 1)
					}
				}
			}()
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 2000 {
						before := fell.Load()
						if l.Current() {
							if before {
								t.Error("Current() = true after another call returned false")
								return
							}
						} else {
							fell.Store(true)
						}
					}
				}()
			}
			wg.Wait()
			close(stop)
			flipper.Wait()
			ok.Store(true)
			if fell.Load() && l.Current() {
				t.Fatal("latch true again after it fell")
			}
			ok.Store(false)
			l.Current()
			ok.Store(true)
			if l.Current() {
				t.Fatal("latch true again after it fell")
			}
		})
	}
}
