package bus

// This file holds docs/PROTOCOL.md to the code: every subject and name bus
// builds, every envelope field, exported wire constant, error code (with its
// result status) and status is on the page, and what its tables list exists.

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// protocolDoc is the page under test; TestProtocolDocDetectsDrift runs the
// checks on mutated copies of it. docName is how messages name it.
var protocolDoc, docName = "../docs/PROTOCOL.md", "docs/PROTOCOL.md"

func ty[T any]() reflect.Type { return reflect.TypeFor[T]() }

// envelopeSections maps each heading that documents an envelope to the types encoded under it. A
// nested struct without a section of its own (Tool, RuntimeArtifact, SourceRef, Usage, Candidate,
// AutoSelection) is in its parent's table as `parent.field` or `parent[].field`.
var envelopeSections = map[string][]reflect.Type{
	"The error object": {ty[teamster.Error]()}, "Prepared attempt": {ty[submitBody](), ty[Attempt]()},
	"Route facts": {ty[selection.Route]()}, "Submit reply": {ty[SubmitReply]()}, "Event": {ty[Event]()},
	"`claimed` data": {ty[ClaimedData]()}, "`partial` data": {ty[PartialData]()},
	"`agent` data": {ty[AgentData](), ty[ApprovalData]()}, "`tool` data": {ty[ToolData]()},
	"`usage` data": {ty[UsageData]()}, "`injection` data": {ty[InjectionData]()}, "Result": {ty[Result]()},
	"Inject request": {ty[InjectRequest]()}, "Inject reply": {ty[InjectReply]()}, "Source grant": {ty[SourceGrant]()},
	"Source revoke": {ty[SourceRevoke]()}, "Revoke broadcast": {ty[SourceRevoked]()},
	"Result request": {ty[ResultRequest]()}, "Result reply": {ty[ResultReply]()},
	"Harnesses request": {ty[HarnessesRequest]()}, "Harnesses reply": {ty[HarnessesReply]()}, "Cancel request": {ty[CancelRequest]()}, "Generic reply": {ty[Reply]()},
	"Session operation": {ty[sessionOpBody](), ty[SessionOp]()}, "Harness reset": {ty[HarnessReset]()},
	"`tool` call": {ty[ToolCall]()}, "`tool` reply": {ty[ToolReply]()}, "`toolTerminal` call": {ty[ToolTerminal]()},
	"`toolTerminal` reply": {ty[ToolTerminalReply]()}, "`userInput` call": {ty[UserInput]()},
	"`userInput` reply": {ty[UserInputReply]()}, "`usage` call": {ty[UsageReport]()},
	"`assertCurrent` call": {ty[AssertCurrent]()}, "`assertCurrent` reply": {ty[AssertCurrentReply]()},
	"`replyMedia` call": {ty[ReplyMedia]()}, "Read request": {ty[RunRead]()}, "Read reply": {ty[RunReadReply]()},
	"Worker control": {ty[WorkerControl]()}, "Worker control reply": {ty[WorkerControlReply]()},
	"Registry entry": {ty[WorkerEntry]()}, "Router entry": {ty[RouterEntry]()}, "Manifest": {ty[selection.Manifest]()}, "Selection record": {ty[selection.Record]()},
}

// notWire names the structs with json tags that never travel, each with the reason.
var notWire = map[string]string{"teamster.SessionRecord": "a Redis hash (see the Redis keys section); its JSON form is the CLI's"}

// subjectBuilders calls each exported function of bus that returns a string with placeholder
// tokens ph-<name>, written back as <name> as the page writes them (enumerated last tokens, see
// enumTokens, too); nil marks a function that builds nothing the page names.
var subjectBuilders = map[string]func() (string, error){
	"AttemptSubject":        func() (string, error) { return AttemptSubject(ph("harnessId")) },
	"ResultSubject":         func() (string, error) { return ResultSubject(teamster.Scope(ph("gatewayId"), ph("attemptId"))) },
	"ResultMsgID":           func() (string, error) { return ResultMsgID(teamster.Scope(ph("gatewayId"), ph("attemptId"))), nil },
	"AttemptMsgID":          func() (string, error) { return AttemptMsgID(teamster.Scope(ph("gatewayId"), ph("attemptId"))), nil },
	"Identified":            func() (string, error) { return Identified(SubjectInject, ph("gatewayId")) },
	"IdentifiedPattern":     nil, // the subscription of what Identified builds
	"SplitIdentified":       nil, // parses what Identified builds
	"SenderInbox":           nil, // InboxPrefix's and DelegateInboxPrefix's prefixes, chosen by sender
	"DelegateInboxPrefix":   func() (string, error) { return DelegateInboxPrefix(ph("gatewayId"), ph("pluginId")), nil },
	"SubmitDelegateSubject": func() (string, error) { return SubmitDelegateSubject(ph("pluginId")) },
	"RunInjectSubject":      func() (string, error) { return RunInjectSubject(ph("attemptId")) },
	"RunCancelSubject":      func() (string, error) { return RunCancelSubject(ph("attemptId")) },
	"RunReadSubject":        func() (string, error) { return RunReadSubject(ph("attemptId")) },
	"SubmitGatewaySubject":  func() (string, error) { return SubmitGatewaySubject(ph("gatewayId")) },
	"WorkerRunSubject": func() (string, error) {
		return WorkerRunSubject(ph("workerId"), teamster.Scope(ph("gatewayId"), ph("attemptId")), "inject")
	},
	"InboxPrefix":          func() (string, error) { return InboxPrefix("gateway", ph("name")) },
	"RunOf":                nil, // parses what RunInjectSubject and RunCancelSubject build
	"SessionOpSubject":     func() (string, error) { return SessionOpSubject(SessionCreate) },
	"HostSubject":          func() (string, error) { return HostSubject(ph("hostId"), ph("attemptId"), HostCallTool) },
	"HostSubjects":         func() (string, error) { return HostSubjects(ph("hostId")) },
	"WorkerControlSubject": func() (string, error) { return WorkerControlSubject(ph("workerId")) },
	"HarnessResetSubject":  func() (string, error) { return HarnessResetSubject(ph("harnessId")) },
	"ConsumerName":         func() (string, error) { return ConsumerName(ph("harnessId")), nil },
	"DelegateFromSubject":  nil, // parses what SubmitDelegateSubject builds
	"SessionOpFromSubject": nil, // parses what SessionOpSubject builds
	"StateObjectTag":       nil, // parses what StateObjectName builds
	"AttemptDigest":        nil, // a digest kept in Redis; it never travels on NATS
	"StateObjectName":      func() (string, error) { return StateObjectName(ph("s"), "ph-epoch:ph-n"), nil },
}

var (
	ph         = func(name string) string { return "ph-" + name }
	phRE       = regexp.MustCompile(`ph-([A-Za-z]+)`)
	enumTokens = strings.NewReplacer("."+SessionCreate, ".<op>", "."+HostCallTool, ".<call>")
)

type constGroup struct{ prefix, heading string }

// constGroups says in which section the page states each exported string constant of bus.
var constGroups = []constGroup{
	{"Subject", "Subjects"}, {"Stream", "Subjects"}, {"Bucket", "Subjects"}, {"Queue", "Subjects"},
	{"Header", "Subjects"}, {"Session", "Subjects"}, {"HostCall", "Subjects"}, {"Event", "Event"},
	{"Agent", "`agent` data"}, {"Approval", "`agent` data"}, {"Injection", "`injection` data"},
	{"Class", "Result"}, {"Status", "Statuses"}, {"Authority", "Inject request"},
	{"Outcome", "`tool` data"}, {"Control", "Worker control"}, {"Worker", "Registry entry"}, {"Read", "Read reply"}, {"Operation", "Prepared attempt"},
}

type valueText struct{ name, heading, row, text string }

// valueTexts says how the page states each exported non-string constant of bus: text, rendered
// from the Go value, is in the section's table row `row`, or anywhere in it when row is empty.
var valueTexts = []valueText{
	{"Version", "Rules for every envelope", "", fmt.Sprintf("`\"v\": %d`", Version)},
	{"MaxBody", "Subjects", "", commas(MaxBody) + " bytes"},
	{"ServerMaxPayload", "Subjects", "", fmt.Sprintf("`max_payload` %d MiB", ServerMaxPayload>>20)},
	{"DefaultTimeoutMs", "Prepared attempt", "timeoutMs", "default " + commas(DefaultTimeoutMs)},
	{"MaxTimeoutMs", "Prepared attempt", "timeoutMs", "1 to " + commas(MaxTimeoutMs)},
	{"DefaultQueueTimeoutMs", "Prepared attempt", "queueTimeoutMs", "default " + commas(DefaultQueueTimeoutMs)},
	{"MaxTimeoutMs", "Prepared attempt", "queueTimeoutMs", "1 to " + commas(MaxTimeoutMs)},
	{"DefaultSettlementTimeoutMs", "Prepared attempt", "settlementTimeoutMs", "default " + commas(DefaultSettlementTimeoutMs)},
	{"MaxSettlementTimeoutMs", "Prepared attempt", "settlementTimeoutMs", "0 to " + commas(MaxSettlementTimeoutMs)},
	{"MaxGeneration", "Inject request", "source.generation", fmt.Sprintf("1 to 2^%d−1", bits.Len64(MaxGeneration))},
	{"MaxDebounceMs", "Inject request", "debounceMs", "0 to " + commas(MaxDebounceMs)},
	{"MaxReadChunk", "Read request", "length", "1 to " + commas(MaxReadChunk)},
	{"DuplicateWindow", "Subjects", StreamAttempts, fmt.Sprintf("duplicate window %d min", DuplicateWindow/time.Minute)},
	{"ResultsMaxAge", "Subjects", StreamResults, fmt.Sprintf("max age %d h", ResultsMaxAge/time.Hour)},
	{"WorkersTTL", "Subjects", BucketWorkers, fmt.Sprintf("expires %d s", WorkersTTL/time.Second)},
	{"ConsumerAckWait", "Subjects", "harness_<harnessId>", fmt.Sprintf("ack wait %d s", ConsumerAckWait/time.Second)},
	{"HeartbeatInterval", "Registry entry", "", fmt.Sprintf("every %d s", HeartbeatInterval/time.Second)},
}

func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func checkSubjects(p *problems, d protoDoc, src *goSource) {
	s := d.section(p, "Subjects")
	if s == nil {
		return
	}
	known := []string{"<replyTo>"} // the submitter's
	for _, name := range slices.Sorted(maps.Keys(subjectBuilders)) {
		if subjectBuilders[name] == nil {
			continue
		}
		got, err := subjectBuilders[name]()
		if err != nil {
			p.add("bus.%s with placeholder tokens: %v", name, err)
			continue
		}
		pat := enumTokens.Replace(phRE.ReplaceAllString(got, "<$1>"))
		if known = append(known, pat); !anySpan(s, pat) {
			p.add("%s: `%s` (built by bus.%s) is missing", s.where(), pat, name)
		}
	}
	for _, f := range src.funcs {
		if _, ok := subjectBuilders[f.name]; !ok {
			p.add("bus.%s (%s) returns a string but is not in subjectBuilders of protocol_doc_test.go", f.name, f.pos)
		}
	}
	known = slices.Concat(known, src.prefixed("Subject"), src.prefixed("Stream"), src.prefixed("Bucket"))
	for _, r := range append(s.table(p, "subject"), s.table(p, "name")...) {
		for _, sp := range spans(r.cells[0]) {
			if !slices.ContainsFunc(known, func(k string) bool { return subjMatch(k, sp) }) {
				p.add("%s line %d lists `%s`, which bus neither builds nor declares", docName, r.line, sp)
			}
		}
	}
}

func checkEnvelopes(p *problems, d protoDoc, src *goSource) {
	own, seen := map[reflect.Type]bool{}, map[string]bool{}
	for _, ts := range envelopeSections {
		for _, t := range ts {
			own[t] = true
		}
	}
	for _, heading := range slices.Sorted(maps.Keys(envelopeSections)) {
		owner, names, want := map[string]string{}, []string{}, []string{}
		for _, t := range envelopeSections[heading] {
			names = append(names, t.String())
			var fs []string
			jsonFields(t, "", own, seen, &fs)
			for _, f := range fs {
				if owner[f] == "" {
					owner[f], want = t.String(), append(want, f)
				}
			}
		}
		s := d.section(p, heading)
		if s == nil {
			continue
		}
		rows, listed := s.table(p, "field"), map[string]bool{}
		for _, r := range rows {
			if f := firstSpan(r.cells[0]); owner[f] == "" {
				p.add("%s line %d lists field `%s`, which %s does not have", docName, r.line, f, strings.Join(names, " or "))
			}
			listed[firstSpan(r.cells[0])] = true
		}
		for _, f := range want {
			if !listed[f] && rows != nil {
				p.add("%s: field `%s` of %s is missing from the field table", s.where(), f, owner[f])
			}
		}
	}
	for _, g := range src.tagged {
		if !seen[g.name] && notWire[g.name] == "" {
			p.add("%s (%s) has json tags but no %s section: map it in envelopeSections of protocol_doc_test.go, or give notWire the reason it never travels", g.name, g.pos, docName)
		}
	}
}

func checkConstants(p *problems, d protoDoc, src *goSource) {
	for _, c := range src.strConsts {
		if i := slices.IndexFunc(constGroups, func(g constGroup) bool { return strings.HasPrefix(c.name, g.prefix) }); i < 0 {
			p.add("bus.%s (%s) = %q is in no group of constGroups in protocol_doc_test.go: say where %s states it", c.name, c.pos, c.value, docName)
		} else if s := d.section(p, constGroups[i].heading); s != nil && !anySpan(s, c.value) {
			p.add("%s: `%s` (bus.%s) is missing", s.where(), c.value, c.name)
		}
	}
	for _, c := range src.otherConsts {
		if !slices.ContainsFunc(valueTexts, func(v valueText) bool { return v.name == c.name }) {
			p.add("bus.%s (%s) is in no entry of valueTexts in protocol_doc_test.go: say where %s states it", c.name, c.pos, docName)
		}
	}
	for _, v := range valueTexts {
		s := d.section(p, v.heading)
		if s == nil {
			continue
		}
		text, where := s.text(), s.where()
		if v.row != "" {
			text, where = "", where+", row `"+v.row+"`"
			for _, t := range s.tables() {
				for _, r := range t[1:] {
					if firstSpan(r.cells[0]) == v.row {
						text += strings.Join(r.cells, " | ")
					}
				}
			}
		}
		if !strings.Contains(text, v.text) {
			p.add("%s: %q (bus.%s) is missing", where, v.text, v.name)
		}
	}
}

func checkErrorCodes(p *problems, d protoDoc, src *goSource) {
	codes := src.root["Code"]
	s := d.section(p, "Error codes")
	if s == nil || len(codes) == 0 {
		p.add("found %d teamster.Code constants in ../errors.go", len(codes))
		return
	}
	rows := map[string]docRow{}
	for _, r := range s.table(p, "code") {
		c := firstSpan(r.cells[0])
		if rows[c] = r; !slices.Contains(codes, c) || !teamster.Code(c).Valid() {
			p.add("%s line %d lists code `%s`, which is not a teamster.Code", docName, r.line, c)
		}
	}
	for _, c := range codes {
		want := string(teamster.Code(c).ResultStatus())
		if r, ok := rows[c]; !ok {
			p.add("%s: code `%s` (result status `%s`) is missing from the table", s.where(), c, want)
		} else if got := firstSpan(strings.Join(r.cells[1:min(2, len(r.cells))], "")); got != want {
			p.add("%s line %d: code `%s` says result status `%s`, but Code.ResultStatus() is `%s`", docName, r.line, c, got, want)
		}
	}
}

func checkStatuses(p *problems, d protoDoc, src *goSource) {
	rows := map[string][]string{
		"result `status`":         src.root["Status"],
		"submit reply `status`":   {StatusAccepted, StatusFallback, StatusRejected},
		"inject reply `status`":   {StatusAccepted, StatusRejected},
		"other replies' `status`": {StatusOK, StatusRejected, StatusAccepted},
		"attempt record `state`":  nil, // leases' attempt records, not bus's
		"worker `state`":          src.prefixed("Worker"),
		"injection event `state`": src.prefixed("Injection"),
		"result `classification`": src.prefixed("Class"),
		"tool `outcome`":          src.prefixed("Outcome"),
		"`authorityKind`":         src.prefixed("Authority"),
		"error `sideEffects`":     src.root["SideEffects"],
	}
	s := d.section(p, "Statuses")
	if s == nil {
		return
	}
	seen := map[string]bool{}
	for _, r := range s.table(p, "where") {
		want, ok := rows[r.cells[0]]
		if seen[r.cells[0]] = true; !ok {
			p.add("%s line %d: row %q is unknown to checkStatuses in protocol_doc_test.go", docName, r.line, r.cells[0])
		}
		if want == nil || len(r.cells) < 2 {
			continue
		}
		for _, v := range want {
			if !slices.Contains(spans(r.cells[1]), v) {
				p.add("%s line %d: row %q misses `%s`", docName, r.line, r.cells[0], v)
			}
		}
		for _, v := range spans(parenRE.ReplaceAllString(r.cells[1], "")) { // asides may name other things
			if !slices.Contains(want, v) {
				p.add("%s line %d: row %q lists `%s`, which the code does not have there (it has %s)", docName, r.line, r.cells[0], v, strings.Join(want, ", "))
			}
		}
	}
	for _, row := range slices.Sorted(maps.Keys(rows)) {
		if !seen[row] {
			p.add("%s: the table has no row %q", s.where(), row)
		}
	}
}

// checkProtocol runs every check on the page at path and reports what each found.
func checkProtocol(path string, report func(check string, p problems)) error {
	d, err := parseDoc(path)
	src, err2 := parseGo()
	if err = errors.Join(err, err2); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		run  func(*problems, protoDoc, *goSource)
	}{{"Subjects", checkSubjects}, {"Envelopes", checkEnvelopes}, {"Constants", checkConstants}, {"ErrorCodes", checkErrorCodes}, {"Statuses", checkStatuses}} {
		var p problems
		c.run(&p, d, src)
		report(c.name, p)
	}
	return nil
}

func TestProtocolDoc(t *testing.T) {
	if err := checkProtocol(protocolDoc, func(check string, p problems) {
		t.Run(check, func(t *testing.T) {
			for _, msg := range p {
				t.Error(msg)
			}
		})
	}); err != nil {
		t.Fatal(err)
	}
}

// TestProtocolDocDetectsDrift shows that the checks fail: each case changes
// a copy of the page as drift would, and the checks must say what it broke.
func TestProtocolDocDetectsDrift(t *testing.T) {
	b, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][3]string{ // old, new, what the checks must say
		{"| `fence` | string | required | `<epoch>:<n>` | the lease's fence |\n", "", "field `fence` of bus.ClaimedData is missing from the field table"},
		{"| `preparedAuth.source` |", "| `preparedAuth.issuer` |", "lists field `preparedAuth.issuer`, which selection.Route does not have"},
		{"| `queue_timeout` | `timeout` |", "| `queue_timeout` | `error` |", "code `queue_timeout` says result status `error`, but Code.ResultStatus() is `timeout`"},
		{"| `owner_only` |", "| `owner_forbidden` |", "code `owner_forbidden`, which is not a teamster.Code"},
		{"`teamster.run.<attemptId>.cancel`", "`teamster.run.<attemptId>.stop`", "`teamster.run.<attemptId>.cancel` (built by bus.RunCancelSubject) is missing"},
		{"`accepted`, `committed`, `cancelled` or `rejected`", "`accepted`, `cancelled` or `rejected`", "`committed` (bus.InjectionCommitted) is missing"},
		{"| result `status` | `ok`, `error`, `cancelled`, `timeout` |", "| result `status` | `ok`, `error`, `timeout` |", "row \"result `status`\" misses `cancelled`"},
		{"ack wait 5 s", "ack wait 30 s", "\"ack wait 5 s\" (bus.ConsumerAckWait) is missing"},
	} {
		if !strings.Contains(string(b), c[0]) {
			t.Fatalf("%s no longer contains %q: update this case", docName, c[0])
		}
		path, all := filepath.Join(t.TempDir(), "PROTOCOL.md"), problems{}
		if err := os.WriteFile(path, []byte(strings.Replace(string(b), c[0], c[1], 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := checkProtocol(path, func(_ string, p problems) { all = append(all, p...) }); err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(all, func(m string) bool { return strings.Contains(m, c[2]) }); i < 0 {
			t.Errorf("replacing %q by %q: the checks did not report %q; they reported:\n%s", c[0], c[1], c[2], strings.Join(all, "\n"))
		} else {
			t.Logf("replacing %q by %q is reported: %s", c[0], c[1], all[i])
		}
	}
}
