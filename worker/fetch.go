package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster/internal/gopool"
)

// Fetching: a poller never fetches without a free slot (Temporal's slot
// supplier idea). It takes one slot and then any others free at that moment,
// up to maxBatch; with several it asks for whatever is waiting without
// waiting; with one (or when nothing was waiting) it long-polls for one
// message. Unused slots go back at once.
const (
	maxBatch = 32
	longPoll = time.Second
	// maxClaiming is how many fetched attempts a worker claims at once. A
	// worker with thousands of free slots that fetches a burst would
	// otherwise start a goroutine per message, each waiting on Redis; the
	// claims share pipelines (leases' batcher), so a few hundred at once
	// keep Redis as busy as thousands would.
	maxClaiming = 256
	// claimerIdle is how long a claim's goroutine waits for the next claim
	// before it ends.
	claimerIdle = 5 * time.Second
)

// fetcher is the worker's fetching: the pollers, the run slots they take, and
// the claims in progress. Its lock guards only the pollers' stop.
type fetcher struct {
	// slots has one entry per slot taken: by a poller, a claim or a run.
	slots chan struct{}
	// claiming bounds the claims in progress (fetched, not yet running or
	// given back), whatever the number of free slots.
	claiming chan struct{}
	// claimers runs the claims, on goroutines kept for reuse.
	claimers *gopool.Pool
	// wg counts the pollers and the claims in progress.
	wg sync.WaitGroup

	mu   sync.Mutex
	stop context.CancelFunc // stops the pollers; nil while not fetching
}

func newFetcher(slots int) fetcher {
	return fetcher{slots: make(chan struct{}, slots), claiming: make(chan struct{}, maxClaiming), claimers: gopool.New(claimerIdle)}
}

// pollersPerHarness is how many pollers each hosted harness runs.
func pollersPerHarness(slots int) int { return min(slots, 4) }

// startFetching starts the pollers of every hosted harness.
func (w *Worker) startFetching() {
	w.fetch.mu.Lock()
	defer w.fetch.mu.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	w.fetch.stop = stop
	for id, h := range w.harnesses {
		for i := 0; i < pollersPerHarness(w.cfg.Slots); i++ {
			w.fetch.wg.Add(1)
			go w.poll(ctx, id, h)
		}
	}
}

// stopFetching stops every poller and waits for them and for the claims in
// progress.
func (w *Worker) stopFetching() {
	w.fetch.mu.Lock()
	stop := w.fetch.stop
	w.fetch.stop = nil
	w.fetch.mu.Unlock()
	if stop != nil {
		stop()
	}
	w.fetch.wg.Wait()
}

func (w *Worker) poll(ctx context.Context, harnessID string, h *hosted) {
	defer w.fetch.wg.Done()
	log := w.log.WithField("harness", harnessID)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(5*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		// Take one slot, waiting for it.
		select {
		case <-ctx.Done():
			return
		case w.fetch.slots <- struct{}{}:
		}
		n := 1
	more:
		for n < maxBatch {
			select {
			case w.fetch.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		// Take whatever is waiting, without waiting; when nothing is, keep
		// one slot and long-poll for one message.
		got, err := w.take(ctx, harnessID, h, n, func() (jetstream.MessageBatch, error) { return h.consumer.FetchNoWait(n) })
		if err == nil && got == 0 {
			for i := 1; i < n; i++ {
				w.releaseSlot()
			}
			n = 1
			fctx, cancel := context.WithTimeout(ctx, longPoll)
			got, err = w.take(ctx, harnessID, h, n, func() (jetstream.MessageBatch, error) {
				return h.consumer.Fetch(1, jetstream.FetchContext(fctx))
			})
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				err = nil // the long poll ended empty
			}
		}
		for i := got; i < n; i++ {
			w.releaseSlot()
		}
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			d := bo.NextBackOff()
			log.WithField("retry_in", d).Warn("fetch failed: " + err.Error())
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
			continue
		}
		bo.Reset()
	}
}

// take runs one fetch and hands each message it yields to claim, in its own
// goroutine holding one of the poller's slots. It returns how many messages
// it handed out (each took its slot along) and the fetch's error.
func (w *Worker) take(ctx context.Context, harnessID string, h *hosted, n int, fetch func() (jetstream.MessageBatch, error)) (int, error) {
	batch, err := fetch()
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		if got == n {
			// More than asked for cannot happen; never run without a slot.
			_ = msg.Nak()
			continue
		}
		got++
		if !w.startClaim(ctx) {
			// Stopped fetching (drain) after the fetch was sent: give the
			// message back at once.
			_ = msg.Nak()
			w.releaseSlot()
			continue
		}
		w.fetch.wg.Add(1)
		w.fetch.claimers.Go(func() {
			defer w.fetch.wg.Done()
			defer func() { <-w.fetch.claiming }()
			w.claim(msg, harnessID, h)
		})
	}
	err = batch.Error()
	if errors.Is(err, jetstream.ErrNoMessages) {
		err = nil
	}
	return got, err
}

func (w *Worker) releaseSlot() { <-w.fetch.slots }

// startClaim waits for room among the claims in progress; false when ctx
// ended (fetching stopped) first.
func (w *Worker) startClaim(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case w.fetch.claiming <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}
