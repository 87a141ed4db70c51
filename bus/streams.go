package bus

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/teamster-fleet/teamster"
)

// Stream and bucket settings of the contract.
const (
	// DuplicateWindow is how long JetStream remembers a Nats-Msg-Id: a
	// resubmitted attempt id within it is stored once.
	DuplicateWindow = 2 * time.Minute
	// ResultsMaxAge is how long a durable result stays readable.
	ResultsMaxAge = 24 * time.Hour
	// WorkersTTL is how long a registry entry lives without a heartbeat.
	WorkersTTL = 10 * time.Second
	// HeartbeatInterval is how often a worker refreshes its registry entry.
	HeartbeatInterval = 2 * time.Second
	// ConsumerAckWait is how long a fetched attempt may stay unacknowledged
	// before JetStream delivers it again. A worker acknowledges (or naks) right
	// after its claim script, so this only matters when a worker dies between
	// fetch and ack; a redelivery after a slow claim is harmless (the claim
	// script answers "done").
	ConsumerAckWait = 5 * time.Second
)

// StreamOptions tunes the streams for a deployment.
type StreamOptions struct {
	// Replicas of each stream and the bucket; default 1.
	Replicas int
}

// AttemptsStreamConfig is TEAMSTER_ATTEMPTS: a work queue on file storage.
func AttemptsStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamAttempts,
		Description: "teamster: prepared attempts, one subject per harness id",
		Subjects:    []string{SubjectAttempts},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  DuplicateWindow,
		MaxMsgSize:  MaxBody * 2,
		Replicas:    replicas(o),
	}
}

// ResultsStreamConfig is TEAMSTER_RESULTS: one result per subject, the first one
// stays, kept for 24 hours.
func ResultsStreamConfig(o StreamOptions) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 StreamResults,
		Description:          "teamster: terminal results, one per attempt",
		Subjects:             []string{SubjectResults},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxAge:               ResultsMaxAge,
		Duplicates:           DuplicateWindow,
		// Results are read by direct get of their subject
		// ($JS.API.DIRECT.GET.TEAMSTER_RESULTS.<subject>): routers,
		// workers and the operator's CLI; gateways ask the routers.
		AllowDirect: true,
		MaxMsgSize:  MaxBody * 2,
		Replicas:    replicas(o),
	}
}

// workersBucketConfig is KV TEAMSTER_WORKERS: the registry, whose entries expire
// WorkersTTL after their last heartbeat.
func workersBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	return registryBucket(BucketWorkers, "teamster: worker registry (manifest, state, slots)", o)
}

// routersBucketConfig is KV TEAMSTER_ROUTERS: the routers' entries (id,
// version, policy digest), which expire WorkersTTL after their last
// heartbeat. Only routers create and update it.
func routersBucketConfig(o StreamOptions) jetstream.KeyValueConfig {
	return registryBucket(BucketRouters, "teamster: router registry (version, policy digest)", o)
}

// registryBucket is a registry's bucket: entries expire WorkersTTL after
// their last write, one revision each, on file.
func registryBucket(name, description string, o StreamOptions) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      name,
		Description: description,
		TTL:         WorkersTTL,
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas(o),
	}
}

func replicas(o StreamOptions) int {
	if o.Replicas < 1 {
		return 1
	}
	return o.Replicas
}

// Setup creates or updates TEAMSTER_ATTEMPTS, TEAMSTER_RESULTS,
// TEAMSTER_WORKERS, TEAMSTER_ROUTERS and TEAMSTER_NATIVE_STATE, and returns the workers' bucket and
// the routers'. It is idempotent: running it again, from any number of
// processes, leaves one of each with the contract's configuration.
func Setup(ctx context.Context, js jetstream.JetStream, o StreamOptions) (workers, routers jetstream.KeyValue, err error) {
	for _, cfg := range []jetstream.StreamConfig{AttemptsStreamConfig(o), ResultsStreamConfig(o)} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return nil, nil, fmt.Errorf("set up stream %s: %w", cfg.Name, err)
		}
	}
	if workers, err = js.CreateOrUpdateKeyValue(ctx, workersBucketConfig(o)); err != nil {
		return nil, nil, fmt.Errorf("set up bucket %s: %w", BucketWorkers, err)
	}
	if routers, err = js.CreateOrUpdateKeyValue(ctx, routersBucketConfig(o)); err != nil {
		return nil, nil, fmt.Errorf("set up bucket %s: %w", BucketRouters, err)
	}
	if _, err = js.CreateOrUpdateObjectStore(ctx, nativeStateBucketConfig(o)); err != nil {
		return nil, nil, fmt.Errorf("set up object store %s: %w", BucketNativeState, err)
	}
	return workers, routers, nil
}

// ErrNotSetUp is a stream, bucket or consumer that no router has created
// yet. Routers are the only part of the fleet that creates or updates them
// (Setup, EnsureHarnessConsumer); a worker that finds one missing waits for
// a router (RetryTransient treats ErrNotSetUp as transient).
var ErrNotSetUp = errors.New("not set up yet: routers create it")

// Lookup finds TEAMSTER_ATTEMPTS, TEAMSTER_RESULTS, TEAMSTER_WORKERS and
// TEAMSTER_NATIVE_STATE, which routers create, and returns the workers'
// bucket: what a worker does at its start. It changes nothing; a missing
// one is ErrNotSetUp. It reads only stream information, which a worker's
// credentials allow.
func Lookup(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	for _, name := range []string{StreamAttempts, StreamResults, "OBJ_" + BucketNativeState} {
		if _, err := js.Stream(ctx, name); err != nil {
			return nil, notSetUp("stream "+name, err)
		}
	}
	kv, err := js.KeyValue(ctx, BucketWorkers)
	if err != nil {
		return nil, notSetUp("bucket "+BucketWorkers, err)
	}
	return kv, nil
}

// notSetUp turns a lookup's not-found error into ErrNotSetUp.
func notSetUp(what string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%s: %w", what, ErrNotSetUp)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// HarnessConsumerConfig is the durable pull consumer harness_<harnessId>, shared
// by every worker hosting harnessID. MaxDeliver is unlimited: only
// queue_timeout ends an unclaimed attempt.
func HarnessConsumerConfig(harnessID string) (jetstream.ConsumerConfig, error) {
	subj, err := AttemptSubject(harnessID)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(harnessID),
		Description:   "teamster: attempts for harness " + harnessID,
		FilterSubject: subj,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ConsumerAckWait,
		MaxDeliver:    -1,
		MaxAckPending: 65536,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, nil
}

// HarnessConsumer looks up harness_<harnessId> on TEAMSTER_ATTEMPTS, which a
// router creates once a worker advertises the harness; ErrNotSetUp until
// then.
func HarnessConsumer(ctx context.Context, js jetstream.JetStream, harnessID string) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, StreamAttempts, ConsumerName(harnessID))
	if err != nil {
		return nil, notSetUp("consumer "+ConsumerName(harnessID), err)
	}
	return c, nil
}

// EnsureHarnessConsumer creates or updates harness_<harnessId> on
// TEAMSTER_ATTEMPTS: a router's work.
func EnsureHarnessConsumer(ctx context.Context, js jetstream.JetStream, harnessID string) (jetstream.Consumer, error) {
	cfg, err := HarnessConsumerConfig(harnessID)
	if err != nil {
		return nil, err
	}
	c, err := js.CreateOrUpdateConsumer(ctx, StreamAttempts, cfg)
	if err != nil {
		return nil, fmt.Errorf("set up consumer %s: %w", cfg.Durable, err)
	}
	return c, nil
}

// DelegateHeader is the header that names delegate on a message (nil for
// the owner: no header).
func DelegateHeader(delegate string) nats.Header {
	if delegate == "" {
		return nil
	}
	return nats.Header{HeaderDelegate: []string{delegate}}
}

// PublishAttemptBody publishes an encoded attempt (body, see Encode) to
// teamster.attempt.<harnessId> with Nats-Msg-Id AttemptMsgID(scopedID), so a
// resubmit within the duplicate window is stored once. headers may carry
// extra headers (for example the delegate's identity) and may be nil. It
// reports whether JetStream saw a duplicate.
func PublishAttemptBody(ctx context.Context, js jetstream.JetStream, harnessID, scopedID string, body []byte, headers nats.Header) (duplicate bool, err error) {
	subj, err := AttemptSubject(harnessID)
	if err != nil {
		return false, err
	}
	if _, id := teamster.Unscope(scopedID); !ValidID(id) {
		return false, CheckID("attemptId", id)
	}
	msg := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
	for k, v := range headers {
		msg.Header[k] = v
	}
	msg.Header.Set(HeaderMsgID, AttemptMsgID(scopedID))
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(StreamAttempts))
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

// ErrResultExists says an attempt already has a different durable result: the
// stream keeps the first one and refuses every other.
var ErrResultExists = errors.New("attempt already has a different durable result")

// PublishResult stores r, a result of the unnamed tenant's attempt,
// durably; see PublishResultBody.
func PublishResult(ctx context.Context, js jetstream.JetStream, r *Result) error {
	body, err := Encode(r)
	if err != nil {
		return err
	}
	return PublishResultBody(ctx, js, r.AttemptID, body)
}

// PublishResultBody stores an encoded result durably on the attempt's
// ResultSubject (scopedID is teamster.Scope(tenant, attemptId)). It returns nil when body is the attempt's
// durable result: stored by this call, or stored before with the same bytes (a
// retry after a lost acknowledgement, or the reaper republishing an outcome
// whose writer died before marking it published). It returns ErrResultExists
// when another result was stored first: the caller must then not send its own
// result to the submitter, because the first one is the result.
func PublishResultBody(ctx context.Context, js jetstream.JetStream, scopedID string, body []byte) error {
	subj, err := ResultSubject(scopedID)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subj, Data: body, Header: nats.Header{}}
	msg.Header.Set(HeaderMsgID, ResultMsgID(scopedID))
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithExpectStream(StreamResults))
	switch {
	case err == nil && !ack.Duplicate:
		return nil
	case err != nil && !isPerSubjectLimit(err):
		return err
	}
	stored, err := getResultMsg(ctx, js, subj)
	if err != nil {
		return fmt.Errorf("read back the stored result of %s: %w", teamster.ScopedDisplay(scopedID), err)
	}
	if bytes.Equal(stored, body) {
		return nil
	}
	return ErrResultExists
}

// jsErrCodeStreamStoreFailed is nats-server's JSStreamStoreFailedF (10077,
// "{err}"): the stream's store refused the message. It is what a publish on
// a results subject that holds its one message gets (MaxMsgsPerSubject 1,
// DiscardNew, DiscardNewPerSubject: the store's ErrMaxMsgsPerSubject, with
// its text as the description). nats.go names no constant for it.
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// isPerSubjectLimit reports whether a publish on TEAMSTER_RESULTS was refused
// by the store, which is how the stream refuses a second result for an
// attempt. It goes by the API error code, never by the text, which is the
// server's wording and may change. The server has no code of its own for the
// per-subject limit: 10077 is any refusal of the store, also for the
// stream-wide limits (messages, bytes), which the results stream does not
// set. Either way the caller reads the subject back, and a refusal that left
// no result there is an error still (the read-back finds no message).
func isPerSubjectLimit(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamStoreFailed
}

// GetResult reads an attempt's durable result (scopedID is
// teamster.Scope(tenant, attemptId)). It returns jetstream.ErrMsgNotFound
// when there is none (yet, or any more).
func GetResult(ctx context.Context, js jetstream.JetStream, scopedID string) (*Result, error) {
	b, err := GetResultBody(ctx, js, scopedID)
	if err != nil {
		return nil, err
	}
	var r Result
	if err := Decode(b, &r); err != nil {
		return nil, fmt.Errorf("result of %s: %w", teamster.ScopedDisplay(scopedID), err)
	}
	return &r, nil
}

// GetResultBody reads an attempt's durable result as stored (the bytes a
// result event carries). It returns jetstream.ErrMsgNotFound when there is
// none (yet, or any more).
func GetResultBody(ctx context.Context, js jetstream.JetStream, scopedID string) ([]byte, error) {
	subj, err := ResultSubject(scopedID)
	if err != nil {
		return nil, err
	}
	return getResultMsg(ctx, js, subj)
}

// getResultMsg reads the one message of a results subject by a direct get
// that names the subject in the request's own subject (no stream info first:
// one round trip, and no read wider than that subject).
func getResultMsg(ctx context.Context, js jetstream.JetStream, subj string) ([]byte, error) {
	m, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+StreamResults+"."+subj, nil)
	if err != nil {
		return nil, err
	}
	if len(m.Data) == 0 && m.Header != nil {
		switch m.Header.Get("Status") {
		case "404":
			return nil, jetstream.ErrMsgNotFound
		case "":
		default:
			return nil, fmt.Errorf("direct get of %s: status %s %s", subj, m.Header.Get("Status"), m.Header.Get("Description"))
		}
	}
	return m.Data, nil
}
