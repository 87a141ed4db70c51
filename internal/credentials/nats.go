package credentials

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/teamster-fleet/teamster/bus"
)

// Roles of the fleet's NATS principals. Each principal is one NATS user,
// authenticated by its NKey, in the one account TEAMSTER.
const (
	RoleGateway  = "gateway"
	RoleDelegate = "delegate"
	RoleRouter   = "router"
	RoleWorker   = "worker"
	RoleOperator = "operator"
)

// Principal is one NATS user of a deployment: a role and the name that
// scopes its subjects (a gateway's id, a delegate's plugin id, a router's or
// worker's id, an operator's name).
type Principal struct {
	Role string
	Name string
	// Gateway is the gateway a delegate is bound to: the tenant whose
	// sessions it continues (delegates only).
	Gateway string
	// Harnesses are the harness ids a worker hosts: its permissions reach
	// only their queues (consumers, acks, resets). None: every harness's.
	Harnesses []string
}

// ID is the principal's file name stem and NATS connection name,
// <role>-<name>, and a delegate's delegate-<pluginId>@<gatewayId>.
func (p Principal) ID() string {
	if p.Role == RoleDelegate {
		return p.Role + "-" + p.Name + "@" + p.Gateway
	}
	return p.Role + "-" + p.Name
}

// InboxPrefix is where the principal's replies and deliveries go, and the
// only place under _INBOX it may subscribe.
func (p Principal) InboxPrefix() string {
	if p.Role == RoleDelegate {
		return bus.DelegateInboxPrefix(p.Gateway, p.Name)
	}
	prefix, _ := bus.InboxPrefix(p.Role, p.Name) // names are checked by Spec.Check
	return prefix
}

// Permissions is one principal's NATS permissions.
type Permissions struct {
	PublishAllow, PublishDeny []string
	// SubscribeAllow entries may carry a queue group: "subject queue".
	SubscribeAllow []string
	// Responses is the allow_responses grant: one reply to each request the
	// principal receives, for ResponsesExpire ("" when none).
	ResponsesMax    int
	ResponsesExpire string
}

// gatewaySubjects are the identified forms of every request a gateway sends
// (bus.Identified): its own subjects only, so that the router takes its
// identity from the subject.
func gatewaySubjects(gateway string) []string {
	var out []string
	for _, s := range []string{
		bus.SubjectSubmit, bus.SubjectInject, bus.SubjectSessionOps, bus.SubjectSourceGrant, bus.SubjectSourceRevoke,
		bus.SubjectRunInjects, bus.SubjectRunCancels,
		bus.SubjectRunReads, // reply attachments from a run's workspace, with its host's token
		bus.SubjectGetResult, bus.SubjectGetHarnesses,
	} {
		id, _ := bus.Identified(s, gateway)
		out = append(out, id)
	}
	return out
}

// plainGatewaySubjects are the plain (unnamed tenant's) forms of the same
// requests, denied to every gateway and delegate outright.
var plainGatewaySubjects = []string{
	bus.SubjectSubmit, bus.SubjectSubmitDelegates, bus.SubjectInject, bus.SubjectSessionOps,
	bus.SubjectSourceGrant, bus.SubjectSourceRevoke, bus.SubjectRunInjects, bus.SubjectRunCancels, bus.SubjectRunReads,
	bus.SubjectGetResult, bus.SubjectGetHarnesses,
}

// jsRead are the JetStream API requests that read a stream: its
// information (with a subjects filter, the keys of a KV bucket), a stored
// message by sequence or, by direct get, by subject.
func jsRead(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
	}
}

// neverForGateways are subjects no gateway or delegate publishes, denied
// outright so that a widened allow list cannot let them in by accident:
// among them the whole JetStream API. NATS checks no permission on a
// request's reply subject, and JetStream publishes its answer there, where
// a stream that captures the subject stores it: any JetStream call would
// let a gateway write into another tenant's result subject or the
// registry. Gateways read results and harnesses through the routers
// (teamster.get.*), which answer only inside the sender's inbox.
var neverForGateways = []string{
	"teamster.attempt.>",
	"teamster.result.>",
	"teamster.worker.>",
	"teamster.harness.>",
	"$JS.>",
	"$KV.>", "$O.>",
}

// PermissionsOf is what p may do: docs/ARCHITECTURE.md, "Security", says why
// each rule is there.
func PermissionsOf(p Principal) Permissions {
	inbox := p.InboxPrefix() + ".>"
	switch p.Role {
	case RoleGateway:
		return Permissions{
			PublishAllow: gatewaySubjects(p.Name),
			PublishDeny:  append(append([]string{"teamster.submit.delegate.>"}, plainGatewaySubjects...), neverForGateways...),
			// Host callbacks are requests from workers, answered on their
			// reply subject through the response grant: one answer each,
			// within the attempt's deadline (a userInput callback may wait
			// for a person, and timeoutMs goes up to 24 h).
			SubscribeAllow: []string{inbox, "teamster.host." + p.Name + ".>"},
			ResponsesMax:   1, ResponsesExpire: "24h",
		}
	case RoleDelegate:
		submit, _ := bus.Identified("teamster.submit.delegate."+p.Name, p.Gateway)
		return Permissions{
			PublishAllow: []string{submit},
			PublishDeny: append(append([]string{"teamster.submit.gateway.>", "teamster.inject.>",
				"teamster.session.>", "teamster.source.>", "teamster.run.>", "$JS.API.>"}, plainGatewaySubjects...), neverForGateways...),
			SubscribeAllow: []string{inbox},
		}
	case RoleRouter:
		return Permissions{
			PublishAllow: []string{
				"teamster.attempt.>",
				"teamster.result.>",
				"teamster.worker.*.run.*.inject", // relays of teamster.inject and teamster.run.<id>.*
				"teamster.worker.*.run.*.cancel",
				"teamster.worker.*.run.*.read",
				"teamster.worker.*.run.*.inject.gateway.*", // the same for a gateway's runs
				"teamster.worker.*.run.*.cancel.gateway.*",
				"teamster.worker.*.run.*.read.gateway.*",
				"teamster.worker.*.control",
				"teamster.harness.*.reset", // after a session reset or delete
				"teamster.source.revoked",  // the revoke broadcast to every worker
				"_INBOX.>",                 // replies, and the reaper's events and results to replyTo
				"$KV.TEAMSTER_ROUTERS.>",
				"$O.TEAMSTER_NATIVE_STATE.>", // deletes a reset session's native state
				"$JS.API.>",                  // the control plane: streams, consumers, buckets
				"$JS.FC.>",                   // flow control of the registry watch
			},
			SubscribeAllow: append(routerServes(), inbox),
			ResponsesMax:   1, ResponsesExpire: "2m",
		}
	case RoleWorker:
		// The queues it may fetch from, ack on and hear resets of: those
		// of the harnesses it hosts (every harness's when none are named).
		consumers, resets := []string{"*"}, []string{"teamster.harness.*.reset"}
		if len(p.Harnesses) > 0 {
			consumers, resets = nil, nil
			for _, h := range p.Harnesses {
				consumers = append(consumers, bus.ConsumerName(h))
				resets = append(resets, "teamster.harness."+h+".reset "+bus.ConsumerName(h))
			}
		}
		pub := []string{
			"teamster.result.>",
			"teamster.host.>",
			"_INBOX.>", // events to replyTo, answers to relayed requests and control
			"$KV." + bus.BucketWorkers + "." + p.Name,
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO." + bus.StreamAttempts,
			// Sessions' native state: objects put (chunks and metadata),
			// read by direct get, deleted (a purge of their chunks).
			"$O." + bus.BucketNativeState + ".>",
			"$JS.API.STREAM.PURGE.OBJ_" + bus.BucketNativeState,
		}
		for _, c := range consumers {
			pub = append(pub,
				// Ack and nak of fetched attempts, in the v1 ack format
				// and the v2 one ($JS.ACK.<domain>.<account hash>.<stream>...).
				"$JS.ACK."+bus.StreamAttempts+"."+c+".>",
				"$JS.ACK.*.*."+bus.StreamAttempts+"."+c+".>",
				"$JS.API.CONSUMER.INFO."+bus.StreamAttempts+"."+c,
				"$JS.API.CONSUMER.MSG.NEXT."+bus.StreamAttempts+"."+c)
		}
		pub = append(pub, jsRead(bus.StreamResults)...)
		pub = append(pub, jsRead("KV_"+bus.BucketWorkers)...)
		pub = append(pub, jsRead("OBJ_"+bus.BucketNativeState)...)
		return Permissions{
			PublishAllow: pub,
			PublishDeny: []string{"teamster.submit", "teamster.submit.>", "teamster.inject", "teamster.session.>",
				"teamster.source.>", "teamster.attempt.>", "teamster.run.>", "teamster.harness.>", "teamster.worker.>",
				"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
				"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.>", "$JS.API.CONSUMER.DELETE.>"},
			SubscribeAllow: append(resets,
				"teamster.worker."+p.Name+".>", // its control subject and its runs' inject and cancel
				"teamster.source.revoked",
				inbox),
		}
	case RoleOperator:
		pub := []string{
			"teamster.worker.*.control",
			"teamster.run.*.cancel",
			"$JS.API.INFO",
			"$JS.API.STREAM.NAMES",
			"$JS.API.STREAM.LIST",
			"$JS.API.STREAM.INFO.*",
			"$JS.API.CONSUMER.NAMES.*",
			"$JS.API.CONSUMER.LIST.*",
			"$JS.API.CONSUMER.INFO.*.*",
		}
		for _, s := range []string{bus.StreamResults, "KV_" + bus.BucketWorkers, "KV_" + bus.BucketRouters, "OBJ_" + bus.BucketNativeState} {
			pub = append(pub, jsRead(s)[1:]...) // STREAM.INFO.* is above
		}
		return Permissions{
			PublishAllow: pub,
			PublishDeny: []string{"teamster.submit", "teamster.submit.>", "teamster.inject", "teamster.session.>",
				"teamster.source.>", "teamster.attempt.>", "teamster.result.>", "teamster.harness.>",
				"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>",
				"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.>", "$JS.API.CONSUMER.DELETE.>",
				"$KV.>", "$O.>"},
			SubscribeAllow: []string{inbox},
		}
	}
	return Permissions{}
}

// routerServes are the subscriptions of a router: every gateway subject in
// its plain and identified forms, in queue group routers.
func routerServes() []string {
	var out []string
	for _, s := range plainGatewaySubjects {
		out = append(out, s+" "+bus.QueueRouters, bus.IdentifiedPattern(s)+" "+bus.QueueRouters)
	}
	return out
}

// natsKeys are a principal's NKey: the seed file the principal logs in with
// and the public key the server config names.
func ensureNKey(dir string, p Principal) (public string, err error) {
	path := filepath.Join(dir, p.ID()+".nk")
	seed, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		if seed, err = kp.Seed(); err != nil {
			return "", err
		}
		if err := writeMounted(path, append(seed, '\n')); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return kp.PublicKey()
}

// EnsureNATS writes dir/<role>-<name>.nk for every principal that has none
// and dir/auth.conf: the account TEAMSTER with one NKey user per principal
// and its permissions (PermissionsOf). It returns the auth file's path.
func EnsureNATS(dir string, principals []Principal) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("# The NATS principals of a teamster deployment, generated by\n" +
		"# `teamster credentials` from its roles' permissions (docs/ARCHITECTURE.md,\n" +
		"# \"Security\"). Regenerate rather than edit: the command keeps every NKey\n" +
		"# and rewrites this file. It holds public keys only; the seeds are the\n" +
		"# *.nk files beside it, one per principal.\n")
	b.WriteString("accounts {\n  TEAMSTER {\n    jetstream: enabled\n    users: [\n")
	for _, p := range principals {
		pub, err := ensureNKey(dir, p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "      # %s %s\n      {\n        nkey: %s\n", p.Role, p.Name, pub)
		writePermissions(&b, PermissionsOf(p))
		b.WriteString("      }\n")
	}
	b.WriteString("    ]\n  }\n}\n")
	path := filepath.Join(dir, "auth.conf")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func writePermissions(b *strings.Builder, p Permissions) {
	b.WriteString("        permissions: {\n          publish: {\n")
	writeList(b, "allow", p.PublishAllow)
	writeList(b, "deny", p.PublishDeny)
	b.WriteString("          }\n          subscribe: {\n")
	writeList(b, "allow", p.SubscribeAllow)
	b.WriteString("          }\n")
	if p.ResponsesMax > 0 {
		fmt.Fprintf(b, "          allow_responses: { max: %d, expires: %q }\n", p.ResponsesMax, p.ResponsesExpire)
	}
	b.WriteString("        }\n")
}

func writeList(b *strings.Builder, key string, subjects []string) {
	if len(subjects) == 0 {
		return
	}
	fmt.Fprintf(b, "            %s: [\n", key)
	for _, s := range subjects {
		// Quoted: an unquoted $ starts a variable in NATS's config syntax.
		b.WriteString("              " + strconv.Quote(s) + "\n")
	}
	b.WriteString("            ]\n")
}

// writeSecret writes a secret that only the host reads (the CA's key, the
// Redis passwords' store, compose's env file): only its owner may read it.
func writeSecret(path string, data []byte) error {
	return os.WriteFile(path, data, 0o600)
}

// writeMounted writes a secret that a container reads from a bind mount (a
// seed, a server's key, a role's Redis password). The container's user is
// not the file's owner (teamster's image runs as uid 65532, redis drops to
// its redis user), so the file is readable by all (0644); what keeps the
// host's other users out is the directory it is in, 0700 (Generate refuses
// one that others may enter).
func writeMounted(path string, data []byte) error {
	return os.WriteFile(path, data, 0o644)
}
