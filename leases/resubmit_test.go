package leases

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// acceptDigest accepts attempt with a digest and a harness of its own.
func acceptDigest(t *testing.T, s *Store, session, attempt, digest, harness string) (Accepted, error) {
	t.Helper()
	return s.Accept(ctx, AcceptArgs{SessionKey: session, AttemptID: attempt, Digest: digest, HarnessID: harness,
		ReplyTo: "_INBOX.first", QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"v":1,"status":"accepted"}`)})
}

// An attempt id is bound to the attempt first accepted under it: the same
// attempt again is answered from the record, with the harness and replyTo
// it was accepted with; another attempt under the id is refused and changes
// nothing, and Known answers the same way without writing.
func TestAcceptBindsTheIDToTheFirstAttempt(t *testing.T) {
	s := newStore(t)
	first, err := acceptDigest(t, s, "sess", "a1", "digest-1", "codex")
	if err != nil || !first.New {
		t.Fatalf("first accept: %+v %v", first, err)
	}
	before := s.rdb.HGetAll(ctx, keysFor("sess").attempt("a1")).Val()

	again, err := s.Accept(ctx, AcceptArgs{SessionKey: "sess", AttemptID: "a1", Digest: "digest-1", HarnessID: "claude-cli",
		ReplyTo: "_INBOX.second", QueueTimeout: time.Minute, RunBudget: time.Minute, Reply: []byte(`{"other":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := Accepted{State: StateAccepted, Reply: []byte(`{"v":1,"status":"accepted"}`), Deadline: first.Deadline,
		HarnessID: "codex", ReplyTo: "_INBOX.first"}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Fatalf("the same attempt again (-want +got):\n%s", diff)
	}

	if _, err := acceptDigest(t, s, "sess", "a1", "digest-2", "claude-cli"); !errors.Is(err, ErrAttemptReused) {
		t.Fatalf("another attempt under the id: %v, want ErrAttemptReused", err)
	}
	if got := s.rdb.HGetAll(ctx, keysFor("sess").attempt("a1")).Val(); !cmp.Equal(before, got) {
		t.Fatalf("the refused accept changed the record:\n%s", cmp.Diff(before, got))
	}
	if order, _ := s.order(ctx, "sess"); !cmp.Equal(order, []string{"a1"}) {
		t.Fatalf("order %v, want [a1]", order)
	}

	known, err := s.Known(ctx, "sess", "a1", "digest-1")
	if err != nil || known.HarnessID != "codex" || known.State != StateAccepted || string(known.Reply) != string(want.Reply) {
		t.Fatalf("Known with the digest: %+v %v", known, err)
	}
	if _, err := s.Known(ctx, "sess", "a1", "digest-2"); !errors.Is(err, ErrAttemptReused) {
		t.Fatalf("Known with another digest: %v, want ErrAttemptReused", err)
	}
	if _, err := s.Known(ctx, "sess", "nope", "digest-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Known of an unknown id: %v, want ErrNotFound", err)
	}
}

// A claim of a message delivered for another harness than the attempt was
// accepted for is refused (foreign) and changes nothing: the accepted
// attempt is still claimed by its own harness afterwards.
func TestClaimRefusesAnotherHarnessesMessage(t *testing.T) {
	s := newStore(t)
	k := newKeeper(t, s, "w1", 5*time.Second, nil)
	if _, err := acceptDigest(t, s, "sess", "a1", "d", "codex"); err != nil {
		t.Fatal(err)
	}
	l, res, err := k.Claim(ctx, "sess", "a1", "claude-cli")
	if err != nil || l != nil || res.Status != ClaimForeign || res.State != "codex" {
		t.Fatalf("claim for claude-cli: %v %v %+v, want foreign (codex)", l, err, res)
	}
	if rec, _ := s.Attempt(ctx, "sess", "a1"); rec.State != StateAccepted {
		t.Fatalf("state %s after a foreign claim, want accepted", rec.State)
	}
	if _, err := s.LeaseOf(ctx, "sess"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a lease exists after a foreign claim: %v", err)
	}
	if l, res, err := k.Claim(ctx, "sess", "a1", "codex"); err != nil || res.Status != Claimed || l == nil {
		t.Fatalf("claim for codex: %v %+v", err, res)
	}
}

// A mark opens its marker's send window: until the marker confirms it sent
// the result event, the attempt stays in the reaper index, and once the
// window has passed a reaper takes the mark over (resend) and only its own
// confirmation counts. A confirmed mark, and a mark made before marks had a
// send window, owe nothing.
func TestAnUnconfirmedMarkIsTakenOverAfterItsSendWindow(t *testing.T) {
	s := newStore(t)
	for _, id := range []string{"died", "sent", "legacy"} {
		accept(t, s, "s-"+id, id, time.Minute)
		finishedOK(t, s, "s-"+id, id, `{"v":1}`)
		if m, err := s.MarkPublished(ctx, "s-"+id, id, "worker-fence"); err != nil || m != MarkedNow {
			t.Fatalf("mark %s: %v %v", id, m, err)
		}
	}
	if ok, err := s.ConfirmSent(ctx, "s-sent", "sent", "worker-fence"); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	s.rdb.HDel(ctx, keysFor("s-legacy").attempt("legacy"), "pubat")
	reap := func(id string) Reaped {
		t.Helper()
		r, err := s.Reap(ctx, DueEntry{Tag: Tag("s-" + id), AttemptID: id}, time.Second, "reaper-token")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Within the window: wait for its end.
	if r := reap("died"); r.Action != ReapWait || time.Until(r.At) <= 0 || time.Until(r.At) > SendWindow {
		t.Fatalf("within the send window: %+v, want wait until its end", r)
	}
	if r := reap("sent"); r.Action != ReapGone {
		t.Fatalf("a confirmed mark: %+v, want gone", r)
	}
	if r := reap("legacy"); r.Action != ReapGone {
		t.Fatalf("a mark without a send window: %+v, want gone", r)
	}

	// The window passed (its start moved back by more than its length).
	key := keysFor("s-died").attempt("died")
	past := time.Now().Add(-SendWindow - time.Second).UnixMilli()
	s.rdb.HSet(ctx, key, "pubat", strconv.FormatInt(past, 10))
	r := reap("died")
	if r.Action != ReapResend || r.Outcome != OutcomeOK || r.ReplyTo != "_INBOX.x" || r.SeqMax != SeqReservation {
		t.Fatalf("after the send window: %+v, want resend", r)
	}
	if got := s.rdb.HGet(ctx, key, "published").Val(); got != "reaper-token" {
		t.Fatalf("mark held by %q after the take-over, want the reaper's token", got)
	}
	// A second reaper within the new window waits; the old marker's late
	// confirmation is not the reaper's.
	if r := reap("died"); r.Action != ReapWait {
		t.Fatalf("a second reaper within the new window: %+v, want wait", r)
	}
	if ok, err := s.ConfirmSent(ctx, "s-died", "died", "worker-fence"); err != nil || ok {
		t.Fatalf("the old marker's confirmation: %v %v, want refused", ok, err)
	}
	if ok, err := s.ConfirmSentTag(ctx, Tag("s-died"), "died", "reaper-token"); err != nil || !ok {
		t.Fatalf("the reaper's confirmation: %v %v", ok, err)
	}
	if r := reap("died"); r.Action != ReapGone {
		t.Fatalf("after the reaper confirmed: %+v, want gone", r)
	}
	if rec, _ := s.Attempt(ctx, "s-died", "died"); !rec.Sent || !rec.Published {
		t.Fatalf("record %+v, want published and sent", rec)
	}
}
