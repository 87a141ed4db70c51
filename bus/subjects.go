// Package bus is teamster's wire contract on NATS: subject builders and the
// identifier rule, the v1 envelopes and their strict decoders, the JetStream
// streams, consumers and KV bucket, and an embedded server for `teamster dev`
// and tests.
package bus

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/teamster-fleet/teamster"
)

// idPattern is the identifier rule of docs/PROTOCOL.md: what may become one subject
// token. It excludes '.', '*', '>', whitespace and the empty string.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ValidID reports whether s may be used as a harness, plugin, worker, host or
// attempt id, that is, as one subject token: it matches idPattern. (It is on
// every hot path, so it does not run the regular expression.)
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > 64 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// CheckID returns an invalid_request error naming field when s is not a valid id.
func CheckID(field, s string) error {
	if ValidID(s) {
		return nil
	}
	return teamster.Errorf(teamster.CodeInvalidRequest, "%s %q does not match %s", field, truncate(s, 80), idPattern)
}

// Subjects and names of the contract.
const (
	SubjectSubmit          = "teamster.submit"
	SubjectSubmitDelegates = "teamster.submit.delegate.*"
	// SubjectRunInjects and SubjectRunCancels are a running attempt's
	// gateway-facing subjects, served by the routers, which relay each
	// request to the worker running the attempt
	// (teamster.worker.<workerId>.run.<attemptId>.inject or .cancel).
	SubjectRunInjects = "teamster.run.*.inject"
	SubjectRunCancels = "teamster.run.*.cancel"
	// SubjectRunReads are a running attempt's workspace reads (RunRead),
	// relayed to the worker like the inject and the cancel.
	SubjectRunReads     = "teamster.run.*.read"
	SubjectInject       = "teamster.inject"
	SubjectSourceGrant  = "teamster.source.grant"
	SubjectSourceRevoke = "teamster.source.revoke"
	// SubjectSourceRevoked is the router's broadcast of a revoke (body
	// SourceRevoke), heard by every worker, so that items of the source in
	// flight are dropped at once rather than at their next Redis check.
	SubjectSourceRevoked = "teamster.source.revoked"
	SubjectSessionOps    = "teamster.session.*"
	// SubjectGetResult and SubjectGetHarnesses are a gateway's reads,
	// answered by the routers (ResultRequest, HarnessesRequest): a gateway
	// reads its results and the harnesses the fleet hosts through them,
	// never from JetStream. NATS checks no permission on the reply subject
	// of a request, and JetStream stores whatever its API answers on a
	// subject a stream captures: a gateway with any JetStream API call could
	// make the server write into another tenant's result subject or the
	// registry. Routers answer only inside the sender's inbox.
	SubjectGetResult    = "teamster.get.result"
	SubjectGetHarnesses = "teamster.get.harnesses"
	SubjectAttempts     = "teamster.attempt.>"
	SubjectResults      = "teamster.result.>"

	StreamAttempts = "TEAMSTER_ATTEMPTS"
	StreamResults  = "TEAMSTER_RESULTS"
	BucketWorkers  = "TEAMSTER_WORKERS"
	BucketRouters  = "TEAMSTER_ROUTERS"
	// BucketNativeState is the object store of sessions' native state.
	BucketNativeState = "TEAMSTER_NATIVE_STATE"

	// QueueRouters is the queue group every router serves its subjects in.
	QueueRouters = "routers"

	// HeaderMsgID is JetStream's de-duplication header.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderDelegate carries a delegate's plugin id on an attempt message.
	// Only routers set it (NATS permissions keep everyone else off
	// teamster.attempt.>), from the subject the delegate submitted on.
	HeaderDelegate = "Teamster-Delegate"
)

const (
	prefixSubmitDelegate = "teamster.submit.delegate."
	prefixSubmitGateway  = "teamster.submit.gateway."
	prefixAttempt        = "teamster.attempt."
	prefixResult         = "teamster.result."
	prefixRun            = "teamster.run."
	prefixSession        = "teamster.session."
	prefixHost           = "teamster.host."
	prefixWorker         = "teamster.worker."
)

// Session operations served on teamster.session.<op>.
const (
	SessionCreate  = "create"
	SessionPatch   = "patch"
	SessionReset   = "reset"
	SessionDelete  = "delete"
	SessionArchive = "archive"
)

// Host callbacks served on teamster.host.<hostId>.<attemptId>.<call>.
const (
	HostCallTool         = "tool"
	HostCallToolTerminal = "toolTerminal"
	HostCallUserInput    = "userInput"
	HostCallUsage        = "usage"
	// HostCallAssertCurrent asks whether the host's assertion of a
	// source-bound item still holds (AssertCurrent).
	HostCallAssertCurrent = "assertCurrent"
	// HostCallReplyMedia tells the host the turn is done and its workspace
	// readable until the host answers (ReplyMedia).
	HostCallReplyMedia = "replyMedia"
)

// AttemptSubject is teamster.attempt.<harnessId>.
func AttemptSubject(harnessID string) (string, error) {
	if err := CheckID("harnessId", harnessID); err != nil {
		return "", err
	}
	return prefixAttempt + harnessID, nil
}

// ResultSubject is where the durable result of an attempt is kept, named by
// its scoped id (teamster.Scope(tenant, attemptId)):
// teamster.result.<attemptId> for the unnamed tenant,
// teamster.result.<gatewayId>.<attemptId> for a gateway's. A gateway's
// permissions let it read only its own prefix.
func ResultSubject(scopedID string) (string, error) {
	tenant, id := teamster.Unscope(scopedID)
	if err := CheckID("attemptId", id); err != nil {
		return "", err
	}
	if tenant == "" {
		return prefixResult + id, nil
	}
	if err := CheckID("gatewayId", tenant); err != nil {
		return "", err
	}
	return prefixResult + tenant + "." + id, nil
}

// ResultMsgID is the de-duplication id of an attempt's durable result:
// result-<attemptId>, or result-<gatewayId>.<attemptId>.
func ResultMsgID(scopedID string) string { return "result-" + msgIDOf(scopedID) }

// AttemptMsgID is the de-duplication id of an attempt's message on
// teamster.attempt.<harnessId>: <attemptId>, or <gatewayId>.<attemptId>, so
// that two tenants' attempts under one id are two messages.
func AttemptMsgID(scopedID string) string { return msgIDOf(scopedID) }

func msgIDOf(scopedID string) string {
	tenant, id := teamster.Unscope(scopedID)
	if tenant == "" {
		return id
	}
	return tenant + "." + id
}

// Identities in subjects. Every request a gateway makes has two forms: the
// plain subject (the unnamed tenant's, for fleets without per-principal
// permissions) and the identified one, <subject>.gateway.<gatewayId>, which
// the shipped NATS permissions let only that gateway publish. The router
// serves both, each on its own subscription, and takes the tenant from the
// identified form's last token, never from a body.
const tokenGateway = "gateway"

// Identified is subject in gateway's identified form; subject itself for
// the unnamed tenant (gateway "").
func Identified(subject, gateway string) (string, error) {
	if gateway == "" {
		return subject, nil
	}
	if err := CheckID("gatewayId", gateway); err != nil {
		return "", err
	}
	return subject + "." + tokenGateway + "." + gateway, nil
}

// IdentifiedPattern is the subscription of pattern's identified forms.
func IdentifiedPattern(pattern string) string { return pattern + "." + tokenGateway + ".*" }

// SplitIdentified returns the plain subject and the gateway of an
// identified subject (one that arrived on an IdentifiedPattern
// subscription), or an invalid_request error.
func SplitIdentified(subject string) (plain, gateway string, err error) {
	i := strings.LastIndexByte(subject, '.')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(subject[:i], '.')
	}
	if j <= 0 || subject[j+1:i] != tokenGateway {
		return "", "", teamster.Errorf(teamster.CodeInvalidRequest, "subject %q does not end in .gateway.<gatewayId>", truncate(subject, 80))
	}
	if err := CheckID("gatewayId", subject[i+1:]); err != nil {
		return "", "", err
	}
	return subject[:j], subject[i+1:], nil
}

// SubmitDelegateSubject is teamster.submit.delegate.<pluginId>.
func SubmitDelegateSubject(pluginID string) (string, error) {
	if err := CheckID("pluginId", pluginID); err != nil {
		return "", err
	}
	return prefixSubmitDelegate + pluginID, nil
}

// DelegateFromSubject returns the plugin id of a teamster.submit.delegate.<pluginId>
// subject, or an invalid_request error.
func DelegateFromSubject(subject string) (string, error) {
	return tokenAfter(subject, prefixSubmitDelegate, "pluginId")
}

// SubmitGatewaySubject is teamster.submit.gateway.<gatewayId>.
func SubmitGatewaySubject(gatewayID string) (string, error) {
	if err := CheckID("gatewayId", gatewayID); err != nil {
		return "", err
	}
	return prefixSubmitGateway + gatewayID, nil
}

// RunInjectSubject is teamster.run.<attemptId>.inject.
func RunInjectSubject(attemptID string) (string, error) {
	if err := CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	return prefixRun + attemptID + ".inject", nil
}

// RunCancelSubject is teamster.run.<attemptId>.cancel.
func RunCancelSubject(attemptID string) (string, error) {
	if err := CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	return prefixRun + attemptID + ".cancel", nil
}

// RunOf returns the attempt id and the request ("inject" or "cancel") of a
// teamster.run.<attemptId>.<request> subject, or an invalid_request error.
func RunOf(subject string) (attemptID, request string, err error) {
	rest, ok := strings.CutPrefix(subject, prefixRun)
	id, req, cut := strings.Cut(rest, ".")
	if !ok || !cut || !runRequest(req) {
		return "", "", teamster.Errorf(teamster.CodeInvalidRequest, "subject %q is not %s<attemptId>.inject, .cancel or .read", truncate(subject, 80), prefixRun)
	}
	if err := CheckID("attemptId", id); err != nil {
		return "", "", err
	}
	return id, req, nil
}

// WorkerRunSubject is teamster.worker.<workerId>.run.<attemptId>.<request>
// (request inject, cancel or read), in the identified form for a gateway's
// attempt (scopedID is teamster.Scope(tenant, attemptId)): where the router
// relays a run's requests to the worker running it. Only that worker may
// subscribe to its subjects; two tenants' attempts under one id have two.
func WorkerRunSubject(workerID, scopedID, request string) (string, error) {
	if err := CheckID("workerId", workerID); err != nil {
		return "", err
	}
	tenant, attemptID := teamster.Unscope(scopedID)
	if err := CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	if !runRequest(request) {
		return "", teamster.Errorf(teamster.CodeInvalidRequest, "run request %q is not inject, cancel or read", truncate(request, 40))
	}
	return Identified(prefixWorker+workerID+".run."+attemptID+"."+request, tenant)
}

// runRequest reports whether req is a run request: inject, cancel or read.
func runRequest(req string) bool { return req == "inject" || req == "cancel" || req == "read" }

// InboxPrefix is the inbox prefix of a principal, _INBOX.<role>.<name>
// (role gateway, delegate, router, worker or operator): every reply and
// delivery it asks for goes under it, and the shipped NATS permissions let
// it subscribe nowhere else under _INBOX.
func InboxPrefix(role, name string) (string, error) {
	switch role {
	case "gateway", "delegate", "router", "worker", "operator":
	default:
		return "", teamster.Errorf(teamster.CodeInvalidRequest, "role %q is not gateway, delegate, router, worker or operator", truncate(role, 40))
	}
	if err := CheckID(role, name); err != nil {
		return "", err
	}
	return "_INBOX." + role + "." + name, nil
}

// DelegateInboxPrefix is the inbox prefix of delegate pluginID bound to
// gateway gatewayID, _INBOX.delegate.<gatewayId>.<pluginId>: a delegate acts
// for one gateway (its attempts are that tenant's), and two gateways'
// delegates of one plugin read only their own replies.
func DelegateInboxPrefix(gatewayID, pluginID string) string {
	return "_INBOX.delegate." + gatewayID + "." + pluginID
}

// SenderInbox is the inbox every reply subject of a sender lies under:
// _INBOX.gateway.<gatewayId> for a gateway, DelegateInboxPrefix for a
// delegate bound to it, _INBOX for the unnamed tenant (tenant "").
func SenderInbox(tenant, delegate string) string {
	switch {
	case tenant == "":
		return "_INBOX"
	case delegate != "":
		return DelegateInboxPrefix(tenant, delegate)
	default:
		return "_INBOX.gateway." + tenant
	}
}

// Under reports whether subject lies under prefix: prefix, a dot, and at
// least one more token.
func Under(prefix, subject string) bool {
	return len(subject) > len(prefix)+1 && subject[len(prefix)] == '.' && strings.HasPrefix(subject, prefix)
}

// ReplyToAllowed reports whether events of tenant's attempt may be sent to
// replyTo: under the inbox of the tenant's gateway or of one of its
// delegates (SenderInbox; _INBOX for the unnamed tenant). Routers refuse any
// other replyTo at submit, and workers send nothing anywhere else, so that
// no submitter can make the fleet publish on another's inbox or on a fleet
// subject.
func ReplyToAllowed(tenant, replyTo string) bool {
	if tenant == "" {
		return Under("_INBOX", replyTo)
	}
	return Under(SenderInbox(tenant, ""), replyTo) || Under("_INBOX.delegate."+tenant, replyTo)
}

// SessionOpSubject is teamster.session.<op>.
func SessionOpSubject(op string) (string, error) {
	switch op {
	case SessionCreate, SessionPatch, SessionReset, SessionDelete, SessionArchive:
		return prefixSession + op, nil
	}
	return "", teamster.Errorf(teamster.CodeInvalidRequest, "session op %q is not create, patch, reset, delete or archive", truncate(op, 40))
}

// SessionOpFromSubject returns the op of a teamster.session.<op> subject.
func SessionOpFromSubject(subject string) (string, error) {
	op, err := tokenAfter(subject, prefixSession, "session op")
	if err != nil {
		return "", err
	}
	if _, err := SessionOpSubject(op); err != nil {
		return "", err
	}
	return op, nil
}

// HostSubject is teamster.host.<hostId>.<attemptId>.<call>.
func HostSubject(hostID, attemptID, call string) (string, error) {
	if err := CheckID("hostId", hostID); err != nil {
		return "", err
	}
	if err := CheckID("attemptId", attemptID); err != nil {
		return "", err
	}
	switch call {
	case HostCallTool, HostCallToolTerminal, HostCallUserInput, HostCallUsage, HostCallAssertCurrent, HostCallReplyMedia:
	default:
		return "", teamster.Errorf(teamster.CodeInvalidRequest, "host call %q is not tool, toolTerminal, userInput, usage, assertCurrent or replyMedia", truncate(call, 40))
	}
	return prefixHost + hostID + "." + attemptID + "." + call, nil
}

// HostSubjects is the wildcard a gateway with hostId subscribes to answer
// its attempts' host callbacks: teamster.host.<hostId>.>.
func HostSubjects(hostID string) (string, error) {
	if err := CheckID("hostId", hostID); err != nil {
		return "", err
	}
	return prefixHost + hostID + ".>", nil
}

// WorkerControlSubject is teamster.worker.<workerId>.control.
func WorkerControlSubject(workerID string) (string, error) {
	if err := CheckID("workerId", workerID); err != nil {
		return "", err
	}
	return prefixWorker + workerID + ".control", nil
}

// ConsumerName is the durable pull consumer shared by every worker hosting
// harnessID: harness_<harnessId>.
func ConsumerName(harnessID string) string { return "harness_" + harnessID }

func tokenAfter(subject, prefix, field string) (string, error) {
	if len(subject) <= len(prefix) || subject[:len(prefix)] != prefix {
		return "", teamster.Errorf(teamster.CodeInvalidRequest, "subject %q is not %s<%s>", truncate(subject, 80), prefix, field)
	}
	tok := subject[len(prefix):]
	if err := CheckID(field, tok); err != nil {
		return "", err
	}
	return tok, nil
}

// truncate shortens s to at most n bytes for an error message, without
// splitting a UTF-8 sequence, and marks the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(s[n]); i++ {
		n--
	}
	return s[:n] + "…"
}
