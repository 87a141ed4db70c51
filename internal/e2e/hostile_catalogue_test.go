package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// catalogue builds every case.
func (hf *hostileFleet) catalogue() []hostileCase {
	var cases []hostileCase
	add := func(group, subject string, kind replyKind, name string, body []byte, want outcome, header nats.Header) {
		cases = append(cases, hostileCase{group: group, name: name, subject: subject, body: body, header: header, kind: kind, want: want})
	}
	generic := func(group, subject string, kind replyKind) {
		for _, g := range genericBodies() {
			add(group, subject, kind, g.name, g.body, g.want, nil)
		}
	}
	delegateHeader := func(id string) nats.Header { return nats.Header{bus.HeaderDelegate: []string{id}} }
	v2, v1 := hf.v2.AttemptID(), hf.v1.AttemptID()

	// teamster.submit: the owner's subject.
	{
		const g, subj = "teamster.submit", bus.SubjectSubmit
		generic(g, subj, replySubmit)
		base := `"v":1,"agentId":"main","sessionKey":"hostile:submit","sessionId":"sid","provider":"openai","modelId":"gpt-5.6-sol","prompt":"hi","modelProvider":{"runtimePolicy":{"compatibleIds":["codex"]}}`
		// with sets fields over base's (a field both name takes extra's
		// value), so that each case is refused for what it names and not
		// for naming a member twice, which has cases of its own.
		with := func(extra string) []byte {
			var m, x map[string]json.RawMessage
			if err := json.Unmarshal([]byte("{"+base+"}"), &m); err != nil {
				panic(err)
			}
			if err := json.Unmarshal([]byte("{"+extra+"}"), &x); err != nil {
				panic(fmt.Sprintf("%s: %v", extra, err))
			}
			maps.Copy(m, x)
			b, err := json.Marshal(m)
			if err != nil {
				panic(err)
			}
			return b
		}
		twice := func(extra string) []byte { return []byte("{" + base + "," + extra + "}") }
		without := func(field string) []byte {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte("{"+base+"}"), &m); err != nil {
				panic(err)
			}
			delete(m, field)
			b, _ := json.Marshal(m)
			return b
		}
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"a delegate field", with(`"delegate":"voice-call"`), invalid},
			{"a tenant field", with(`"tenant":"gateway-2"`), invalid},
			{"sessionKey twice", twice(`"sessionKey":"hostile:other"`), invalid},
			{"sessionKey twice, in another case", twice(`"SESSIONKEY":"hostile:other"`), invalid},
			{"a member twice inside modelProvider", with(`"modelProvider":{"requestTransportOverrides":"none","requestTransportOverrides":"present"}`), invalid},
			{"sessionKey with invalid UTF-8", []byte("{" + base[:strings.Index(base, `"sessionKey"`)] + "\"sessionKey\":\"a\xffb\"," + base[strings.Index(base, `"sessionId"`):] + "}"), invalid},
			{"a delegate field, null", with(`"delegate":null`), invalid},
			{"a delegate field, an object", with(`"delegate":{"id":"voice-call"}`), invalid},
			{"a delegate field, empty", with(`"delegate":""`), invalid},
			{"no sessionKey", without("sessionKey"), invalid},
			{"no agentId", without("agentId"), invalid},
			{"no provider", without("provider"), invalid},
			{"no modelId", without("modelId"), invalid},
			{"no sessionId", without("sessionId"), invalid},
			{"sessionKey of 1025 bytes", with(`"sessionKey":"` + repeat("k", 1025) + `"`), invalid},
			{"sessionKey just under 1 MiB", padTo(`{"v":1,"agentId":"main","sessionId":"sid","provider":"openai","modelId":"m","prompt":"hi","sessionKey":"`+repeat("k", bus.MaxBody-200)+`"}`, bus.MaxBody), invalid},
			{"sessionKey with NUL", with(`"sessionKey":"a\u0000b"`), invalid},
			{"sessionKey with a newline", with(`"sessionKey":"a\nb"`), invalid},
			{"sessionKey a number", with(`"sessionKey":7`), invalid},
			{"attemptId a.b", with(`"attemptId":"a.b"`), invalid},
			{"attemptId *", with(`"attemptId":"*"`), invalid},
			{"attemptId >", with(`"attemptId":">"`), invalid},
			{"attemptId with a space", with(`"attemptId":"a b"`), invalid},
			{"attemptId unicode", with(`"attemptId":"ünïcødé"`), invalid},
			{"attemptId of 65 characters", with(`"attemptId":"` + repeat("a", 65) + `"`), invalid},
			{"attemptId with a leading dash", with(`"attemptId":"-a"`), invalid},
			{"agentHarnessId co.dex", with(`"agentHarnessId":"co.dex"`), invalid},
			{"agentHarnessRuntimeOverride >", with(`"agentHarnessRuntimeOverride":">"`), invalid},
			{"hostId gw.*", with(`"hostId":"gw.*"`), invalid},
			{"replyTo with a wildcard", with(`"replyTo":"_INBOX.*"`), invalid},
			{"replyTo with an empty token", with(`"replyTo":"a..b"`), invalid},
			{"replyTo with a space", with(`"replyTo":"has space"`), invalid},
			{"replyTo >", with(`"replyTo":">"`), invalid},
			{"timeoutMs -1", with(`"timeoutMs":-1`), invalid},
			{"timeoutMs 86400001", with(`"timeoutMs":86400001`), invalid},
			{"timeoutMs 1e20", with(`"timeoutMs":1e20`), invalid},
			{"timeoutMs 1.5", with(`"timeoutMs":1.5`), invalid},
			{"timeoutMs a string", with(`"timeoutMs":"600000"`), invalid},
			{"queueTimeoutMs -5", with(`"queueTimeoutMs":-5`), invalid},
			{"queueTimeoutMs max int64", with(`"queueTimeoutMs":9223372036854775807`), invalid},
			{"queueTimeoutMs past int64", with(`"queueTimeoutMs":9223372036854775808`), invalid},
			{"settlementTimeoutMs -1", with(`"settlementTimeoutMs":-1`), invalid},
			{"settlementTimeoutMs 3600001", with(`"settlementTimeoutMs":3600001`), invalid},
			{"requestTransportOverrides maybe", with(`"modelProvider":{"requestTransportOverrides":"maybe"}`), invalid},
			{"compatibleIds with co.dex", with(`"modelProvider":{"runtimePolicy":{"compatibleIds":["co.dex"]}}`), invalid},
			{"images not objects", with(`"images":[1,"x"]`), invalid},
			{"a tool without a name", with(`"tools":[{"name":""}]`), invalid},
			{"tools an object", with(`"tools":{}`), invalid},
			{"toolsAllow with an empty name", with(`"toolsAllow":[""]`), invalid},
			{"expectedRuntimeArtifact without id", with(`"expectedRuntimeArtifact":{"id":"","fingerprint":"f"}`), invalid},
			{"prompt an object", with(`"prompt":{}`), invalid},
			{"modelSelectionLocked a string", with(`"modelSelectionLocked":"yes"`), invalid},
			{"routes a string", with(`"routes":"x"`), invalid},
			{"unicode-heavy prompt, invalid attemptId", with(`"prompt":"` + unicodeText + `","attemptId":"` + unicodeText + `"`), invalid},
			{"forged fence, invalid agentHarnessId", with(`"fence":"x:999","agentHarnessId":"x.y"`), invalid},
			{"pinned to an unregistered harness", with(`"agentHarnessId":"ghost"`), rejectedWith(teamster.CodeHarnessNotRegistered)},
			{"pinned to codex without a route", []byte(`{"v":1,"agentId":"main","sessionKey":"hostile:submit","sessionId":"sid","provider":"openai","modelId":"gpt-5.6-sol","prompt":"hi","agentHarnessId":"codex"}`), rejectedWith(teamster.CodeHarnessUnsupportedRoute)},
			{"pinned to openclaw: fallback, nothing recorded", with(`"agentHarnessId":"openclaw"`), outcome{status: bus.StatusFallback}},
			{"no harness for the provider: fallback", with(`"provider":"mistral"`), outcome{status: bus.StatusFallback}},
		} {
			add(g, subj, replySubmit, c.name, c.body, c.want, nil)
		}
		add(g, subj, replySubmit, "Teamster-Delegate header, invalid body", with(`"timeoutMs":-1`), invalid, delegateHeader("voice-call"))
	}

	// teamster.submit.delegate.<pluginId>: a delegate's subject.
	{
		const g = "teamster.submit.delegate.<pluginId>"
		subj := "teamster.submit.delegate.voice-call"
		generic(g, subj, replySubmit)
		s := hf.locked
		base := map[string]any{"v": 1, "agentId": "main", "sessionKey": s, "sessionId": "sid-" + s, "storePath": "/var/openclaw/" + s,
			"provider": "openai", "modelId": "gpt-5.6-sol", "prompt": "hostile delegate turn", "agentHarnessId": "codex",
			"agentHarnessRuntimeOverride": "codex", "modelSelectionLocked": true,
			"modelProvider": map[string]any{"runtimePolicy": map[string]any{"compatibleIds": []string{"codex"}}}}
		body := func(change map[string]any) []byte {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			for k, v := range change {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			b, _ := json.Marshal(m)
			return b
		}
		denied := rejectedWith(teamster.CodeDelegationDenied)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"an unlisted delegate", "teamster.submit.delegate.sms-bridge", body(nil), denied},
			{"the owner's own plugin", "teamster.submit.delegate.codex", body(nil), denied},
			{"wrong sessionId", subj, body(map[string]any{"sessionId": "another"}), denied},
			{"wrong storePath", subj, body(map[string]any{"storePath": "/elsewhere"}), denied},
			{"wrong agentId", subj, body(map[string]any{"agentId": "other-agent"}), denied},
			{"modelSelectionLocked false", subj, body(map[string]any{"modelSelectionLocked": false}), denied},
			{"agentHarnessId not the pin", subj, body(map[string]any{"agentHarnessId": "claude-cli"}), denied},
			{"agentHarnessRuntimeOverride missing", subj, body(map[string]any{"agentHarnessRuntimeOverride": nil}), denied},
			{"a session with no record", subj, body(map[string]any{"sessionKey": "hostile:nobody"}), denied},
			{"the running session (no record yet)", subj, body(map[string]any{"sessionKey": hf.v2Session, "sessionId": "sid-" + hf.v2Session, "storePath": "/var/openclaw/" + hf.v2Session}), denied},
			{"unicode-heavy sessionId", subj, body(map[string]any{"sessionId": unicodeText}), denied},
			{"a delegate field naming itself", subj, body(map[string]any{"delegate": "voice-call"}), invalid},
			{"a delegate field naming the owner", subj, body(map[string]any{"delegate": "codex"}), invalid},
			{"a delegate field, null", subj, append(body(nil)[:len(body(nil))-1], []byte(`,"delegate":null}`)...), invalid},
			{"pluginId * (literal)", "teamster.submit.delegate.*", body(nil), invalid},
			{"pluginId > (literal)", "teamster.submit.delegate.>", body(nil), invalid},
			{"pluginId unicode", "teamster.submit.delegate.vöice-call", body(nil), invalid},
			{"pluginId of 65 characters", "teamster.submit.delegate." + repeat("v", 65), body(nil), invalid},
			{"pluginId with a leading dash", "teamster.submit.delegate.-voice", body(nil), invalid},
			{"pluginId with a dot", "teamster.submit.delegate.voice.call", body(nil), noResponders},
			{"no pluginId", "teamster.submit.delegate", body(nil), noResponders},
			{"timeoutMs out of range", subj, body(map[string]any{"timeoutMs": 86400001}), invalid},
		} {
			add(g, c.subject, replySubmit, c.name, c.body, c.want, nil)
		}
		add(g, subj, replySubmit, "a forged Teamster-Delegate header naming the owner", body(map[string]any{"sessionId": "another"}), denied, delegateHeader("codex"))
	}

	// teamster.inject: the router finds the running turn.
	{
		const g, subj = "teamster.inject", bus.SubjectInject
		generic(g, subj, replyInject)
		inj := func(fields string) []byte { return []byte(`{"v":1,` + fields + `}`) }
		bySession := func(session, rest string) []byte { return inj(fmt.Sprintf(`"sessionKey":%q,%s`, session, rest)) }
		bound := func(src string, gen string) string {
			return fmt.Sprintf(`"text":"hostile words","authorityKind":"source-bound","source":{"id":%q,"generation":%s}`, src, gen)
		}
		revoked := rejectedWith(teamster.CodeSourceRevoked)
		noRun := rejectedWith(teamster.CodeNoActiveRun)
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"neither sessionKey nor attemptId", inj(`"text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId a.b", inj(`"attemptId":"a.b","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId *", inj(`"attemptId":"*","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId >", inj(`"attemptId":">","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId with a space", inj(`"attemptId":"a b","text":"hostile","authorityKind":"run"`), invalid},
			{"attemptId unicode", inj(`"attemptId":"ünï","text":"hostile","authorityKind":"run"`), invalid},
			{"sessionKey of 1025 bytes", bySession(repeat("k", 1025), `"text":"hostile","authorityKind":"run"`), invalid},
			{"sessionKey with NUL", inj(`"sessionKey":"a\u0000b","text":"hostile","authorityKind":"run"`), invalid},
			{"no text", bySession(hf.v2Session, `"authorityKind":"run"`), invalid},
			{"text a number", bySession(hf.v2Session, `"text":5,"authorityKind":"run"`), invalid},
			{"no authorityKind", bySession(hf.v2Session, `"text":"hostile"`), invalid},
			{"authorityKind root", bySession(hf.v2Session, `"text":"hostile","authorityKind":"root"`), invalid},
			{"run input with a source", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","source":{"id":"src-granted","generation":3}`), invalid},
			{"source-bound without a source", bySession(hf.v2Session, `"text":"hostile","authorityKind":"source-bound"`), invalid},
			{"source id src.x", bySession(hf.v2Session, bound("src.x", "3")), invalid},
			{"generation 0", bySession(hf.v2Session, bound("src-granted", "0")), invalid},
			{"generation -7", bySession(hf.v2Session, bound("src-granted", "-7")), invalid},
			{"generation 1e30", bySession(hf.v2Session, bound("src-granted", "1e30")), invalid},
			{"generation a string", bySession(hf.v2Session, bound("src-granted", `"3"`)), invalid},
			{"debounceMs -1", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","debounceMs":-1`), invalid},
			{"debounceMs 60001", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","debounceMs":60001`), invalid},
			{"images not objects", bySession(hf.v2Session, `"text":"hostile","authorityKind":"run","images":["x"]`), invalid},
			{"a session with no running turn", bySession("hostile:idle", `"text":"hostile","authorityKind":"run"`), noRun},
			{"the finished session", bySession(hf.locked, `"text":"hostile","authorityKind":"run"`), noRun},
			{"an attempt that never existed", inj(`"attemptId":"01HOSTILE0000000000000000","text":"hostile","authorityKind":"run"`), noRun},
			{"a finished attempt", inj(fmt.Sprintf(`"attemptId":%q,"text":"hostile","authorityKind":"run"`, hf.finishedAttempt)), noRun},
			{"unicode-heavy text, no running turn", bySession("hostile:idle", `"text":"`+unicodeText+`","authorityKind":"run"`), noRun},
			{"text just under 1 MiB, no running turn", padTo(string(bySession("hostile:idle", `"text":"`+repeat("t", bus.MaxBody-200)+`","authorityKind":"run"`)), bus.MaxBody), noRun},
			{"source-bound, a generation never granted", bySession(hf.v2Session, bound("src-never", "1")), revoked},
			{"source-bound, the revoked generation", bySession(hf.v2Session, bound("src-revoked", "1")), revoked},
			{"source-bound, max int64 generation", bySession(hf.v2Session, bound("src-granted", "9223372036854775807")), rejectedWith(teamster.CodeInvalidRequest)},
			{"source-bound, generation 2^53", bySession(hf.v2Session, bound("src-granted", "9007199254740992")), rejectedWith(teamster.CodeInvalidRequest)},
			{"source-bound, generation 2^53-1 never granted", bySession(hf.v2Session, bound("src-granted", "9007199254740991")), revoked},
			{"source-bound, a generation below the grant", bySession(hf.v2Session, bound("src-granted", "2")), revoked},
			{"source-bound, a generation above the grant", bySession(hf.v2Session, bound("src-granted", "4")), revoked},
			{"source-bound by attemptId, never granted", inj(fmt.Sprintf(`"attemptId":%q,%s`, v2, bound("src-never", "1"))), revoked},
			{"source-bound, unicode-heavy text, never granted", bySession(hf.v2Session, fmt.Sprintf(`"text":%q,"authorityKind":"source-bound","source":{"id":"src-never","generation":1}`, unicodeText)), revoked},
			{"source-bound to the V1 harness", bySession(hf.v1Session, bound("src-granted", "3")), rejectedWith(teamster.CodeInjectionRequiresV2)},
		} {
			add(g, subj, replyInject, c.name, c.body, c.want, nil)
		}
	}

	// teamster.run.<attemptId>.inject: the routers relay it to the worker
	// running the attempt; one that is not running is no_active_run.
	{
		const g = "teamster.run.<attemptId>.inject"
		subj, _ := bus.RunInjectSubject(v2)
		v1subj, _ := bus.RunInjectSubject(v1)
		generic(g, subj, replyInject)
		inj := func(rest string) []byte { return []byte(`{"v":1,` + rest + `}`) }
		bound := func(src, gen string) []byte {
			return inj(fmt.Sprintf(`"text":"hostile words","authorityKind":"source-bound","source":{"id":%q,"generation":%s}`, src, gen))
		}
		revoked := rejectedWith(teamster.CodeSourceRevoked)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"attemptId naming another run", subj, inj(fmt.Sprintf(`"attemptId":%q,"text":"hostile","authorityKind":"run"`, v1)), invalid},
			{"attemptId a.b", subj, inj(`"attemptId":"a.b","text":"hostile","authorityKind":"run"`), invalid},
			{"no text", subj, inj(`"authorityKind":"run"`), invalid},
			{"empty text", subj, inj(`"text":"","authorityKind":"run"`), invalid},
			{"text an array", subj, inj(`"text":["hostile"],"authorityKind":"run"`), invalid},
			{"no authorityKind", subj, inj(`"text":"hostile"`), invalid},
			{"authorityKind owner", subj, inj(`"text":"hostile","authorityKind":"owner"`), invalid},
			{"run input with a source", subj, inj(`"text":"hostile","authorityKind":"run","source":{"id":"src-granted","generation":3}`), invalid},
			{"source-bound without a source", subj, inj(`"text":"hostile","authorityKind":"source-bound"`), invalid},
			{"source id *", subj, bound("*", "3"), invalid},
			{"generation 0", subj, bound("src-granted", "0"), invalid},
			{"generation past int64", subj, bound("src-granted", "9223372036854775808"), invalid},
			{"debounceMs 1e9", subj, inj(`"text":"hostile","authorityKind":"run","debounceMs":1000000000`), invalid},
			{"images a string", subj, inj(`"text":"hostile","authorityKind":"run","images":"x"`), invalid},
			{"a generation never granted", subj, bound("src-never", "1"), revoked},
			{"the revoked generation", subj, bound("src-revoked", "1"), revoked},
			{"a generation above the revoked one, never granted", subj, bound("src-revoked", "2"), revoked},
			{"max int64 generation", subj, bound("src-granted", "9223372036854775807"), rejectedWith(teamster.CodeInvalidRequest)},
			{"a generation below the grant", subj, bound("src-granted", "1"), revoked},
			{"a generation above the grant", subj, bound("src-granted", "4"), revoked},
			{"unicode-heavy text, never granted", subj, inj(fmt.Sprintf(`"text":%q,"authorityKind":"source-bound","source":{"id":"src-never","generation":1}`, unicodeText)), revoked},
			{"text just under 1 MiB, never granted", subj, padTo(`{"v":1,"authorityKind":"source-bound","source":{"id":"src-never","generation":1},"text":"`+repeat("t", bus.MaxBody-300)+`"}`, bus.MaxBody), revoked},
			{"source-bound to the V1 run", v1subj, bound("src-granted", "3"), rejectedWith(teamster.CodeInjectionRequiresV2)},
			{"an attempt nobody runs", "teamster.run.01HOSTILE0000000000000000.inject", inj(`"text":"hostile","authorityKind":"run"`), rejectedWith(teamster.CodeNoActiveRun)},
			{"the finished attempt", "teamster.run." + hf.finishedAttempt + ".inject", inj(`"text":"hostile","authorityKind":"run"`), rejectedWith(teamster.CodeNoActiveRun)},
			{"attemptId * (literal)", "teamster.run.*.inject", inj(`"text":"hostile","authorityKind":"run"`), invalid},
			{"teamster.run.> (literal)", "teamster.run.>", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
			{"an extra token", subj + ".x", inj(`"text":"hostile","authorityKind":"run"`), noResponders},
		} {
			add(g, c.subject, replyInject, c.name, c.body, c.want, nil)
		}
	}

	// teamster.run.<attemptId>.cancel: none of these may cancel the run.
	{
		const g = "teamster.run.<attemptId>.cancel"
		subj, _ := bus.RunCancelSubject(v2)
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"reason with NUL", subj, []byte(`{"v":1,"reason":"a\u0000b"}`), invalid},
			{"reason with a newline", subj, []byte(`{"v":1,"reason":"a\nb"}`), invalid},
			{"reason with an escape sequence", subj, []byte(`{"v":1,"reason":"\u001b[31mred"}`), invalid},
			{"reason of 257 bytes", subj, []byte(`{"v":1,"reason":"` + repeat("r", 257) + `"}`), invalid},
			{"reason just under 1 MiB", subj, padTo(`{"v":1,"reason":"`+repeat("r", bus.MaxBody-100)+`"}`, bus.MaxBody), invalid},
			{"reason a number", subj, []byte(`{"v":1,"reason":5}`), invalid},
			{"reason an object", subj, []byte(`{"v":1,"reason":{}}`), invalid},
			{"v 2 with a reason", subj, []byte(`{"v":2,"reason":"stop"}`), invalid},
			{"an attempt nobody runs", "teamster.run.01HOSTILE0000000000000000.cancel", []byte(`{"v":1}`), rejectedWith(teamster.CodeNoActiveRun)},
			{"the finished attempt", "teamster.run." + hf.finishedAttempt + ".cancel", []byte(`{"v":1}`), rejectedWith(teamster.CodeNoActiveRun)},
			{"attemptId * (literal)", "teamster.run.*.cancel", []byte(`{"v":1}`), invalid},
			{"teamster.run.> (literal)", "teamster.run.>", []byte(`{"v":1}`), noResponders},
			{"an extra token", subj + ".x", []byte(`{"v":1}`), noResponders},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, nil)
		}
	}

	// teamster.session.<op>: owner-only operations.
	{
		const g = "teamster.session.<op>"
		generic(g, "teamster.session.reset", replyPlain)
		ops := []string{"create", "patch", "reset", "delete", "archive"}
		body := func(session, rest string) []byte {
			if rest != "" {
				rest = "," + rest
			}
			return []byte(fmt.Sprintf(`{"v":1,"sessionKey":%q%s}`, session, rest))
		}
		for _, op := range ops {
			add(g, "teamster.session."+op, replyPlain, op+" from a delegate (header)", body(hf.locked, `"sessionId":"hijacked"`),
				rejectedWith(teamster.CodeOwnerOnly), delegateHeader("voice-call"))
			add(g, "teamster.session."+op, replyPlain, op+" of the running session", body(hf.v2Session, `"sessionId":"hijacked"`),
				rejectedWith(teamster.CodeSessionBusy), nil)
		}
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
			header        nats.Header
		}{
			{"reset, delegate key in the body", "teamster.session.reset", body(hf.locked, `"delegate":"voice-call"`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"delete, delegate key null", "teamster.session.delete", body(hf.locked, `"delegate":null`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"patch, delegate key empty", "teamster.session.patch", body(hf.locked, `"delegate":""`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"archive, delegate key an object", "teamster.session.archive", body(hf.locked, `"delegate":{"id":"codex"}`), rejectedWith(teamster.CodeOwnerOnly), nil},
			{"reset, header and body", "teamster.session.reset", body(hf.locked, `"delegate":"voice-call"`), rejectedWith(teamster.CodeOwnerOnly), delegateHeader("voice-call")},
			{"reset, the owner's own plugin as the header", "teamster.session.reset", body(hf.locked, ""), rejectedWith(teamster.CodeOwnerOnly), delegateHeader("codex")},
			{"an unknown op", "teamster.session.explode", body(hf.locked, ""), invalid, nil},
			{"an op in capitals", "teamster.session.RESET", body(hf.locked, ""), invalid, nil},
			{"a unicode op", "teamster.session.ünï", body(hf.locked, ""), invalid, nil},
			{"op * (literal)", "teamster.session.*", body(hf.locked, ""), invalid, nil},
			{"op > (literal)", "teamster.session.>", body(hf.locked, ""), invalid, nil},
			{"an unknown op from a delegate", "teamster.session.explode", body(hf.locked, ""), invalid, delegateHeader("voice-call")},
			{"an extra token", "teamster.session.reset.x", body(hf.locked, ""), noResponders, nil},
			{"no sessionKey", "teamster.session.patch", []byte(`{"v":1,"sessionId":"x"}`), invalid, nil},
			{"sessionKey of 1025 bytes", "teamster.session.patch", body(repeat("k", 1025), ""), invalid, nil},
			{"sessionKey with NUL", "teamster.session.patch", []byte(`{"v":1,"sessionKey":"a\u0000b"}`), invalid, nil},
			{"sessionId with a control character", "teamster.session.patch", body(hf.locked, `"sessionId":"a\u0007b"`), invalid, nil},
			{"agentHarnessId a.b", "teamster.session.patch", body(hf.locked, `"agentHarnessId":"a.b"`), invalid, nil},
			{"modelSelectionLocked a string", "teamster.session.patch", body(hf.locked, `"modelSelectionLocked":"no"`), invalid, nil},
			{"storePath just under 1 MiB", "teamster.session.patch", padTo(`{"v":1,"sessionKey":"hostile:locked","storePath":"`+repeat("p", bus.MaxBody-100)+`"}`, bus.MaxBody), invalid, nil},
			{"unicode-heavy sessionId of 257 bytes", "teamster.session.patch", body(hf.locked, `"sessionId":"`+repeat("ü", 129)+`"`), invalid, nil},
			{"create over an existing record", "teamster.session.create", body(hf.locked, `"sessionId":"hijacked"`), invalid, nil},
			{"patch of a session with no record", "teamster.session.patch", body("hostile:nobody", `"sessionId":"x"`), invalid, nil},
			{"archive of a session with no record", "teamster.session.archive", body("hostile:nobody", ""), invalid, nil},
			{"reset of a session with no record: ok, nothing to do", "teamster.session.reset", body("hostile:nobody", ""), okReply, nil},
			{"delete of a session with no record: ok, nothing to do", "teamster.session.delete", body("hostile:nobody", ""), okReply, nil},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, c.header)
		}
	}

	// teamster.source.grant and teamster.source.revoke.
	{
		const g, subj = "teamster.source.grant", bus.SubjectSourceGrant
		generic(g, subj, replyPlain)
		grant := func(id, gen string) []byte { return []byte(fmt.Sprintf(`{"v":1,"id":%q,"generation":%s}`, id, gen)) }
		for _, c := range []struct {
			name string
			body []byte
		}{
			{"id a.b", grant("a.b", "1")},
			{"id *", grant("*", "1")},
			{"id >", grant(">", "1")},
			{"id with a space", grant("a b", "1")},
			{"id unicode", grant("ünï", "1")},
			{"id of 65 characters", grant(repeat("s", 65), "1")},
			{"id empty", grant("", "1")},
			{"id with braces (a Redis hash tag)", grant("a}{b", "1")},
			{"id a number", []byte(`{"v":1,"id":5,"generation":1}`)},
			{"no id", []byte(`{"v":1,"generation":1}`)},
			{"no generation", []byte(`{"v":1,"id":"src-new"}`)},
			{"generation 0", grant("src-new", "0")},
			{"generation -1", grant("src-new", "-1")},
			{"generation 1.5", grant("src-new", "1.5")},
			{"generation a string", grant("src-new", `"2"`)},
			{"generation 1e400", grant("src-new", "1e400")},
			{"generation past int64", grant("src-new", "9223372036854775808")},
			{"the revoked generation again", grant("src-revoked", "1")},
			{"below the current grant", grant("src-granted", "2")},
			{"unicode-heavy id", grant(unicodeText, "1")},
		} {
			add(g, subj, replyPlain, c.name, c.body, invalid, nil)
		}
	}
	{
		const g, subj = "teamster.source.revoke", bus.SubjectSourceRevoke
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name string
			body []byte
			want outcome
		}{
			{"id a.b", []byte(`{"v":1,"id":"a.b"}`), invalid},
			{"id *", []byte(`{"v":1,"id":"*"}`), invalid},
			{"id >", []byte(`{"v":1,"id":">"}`), invalid},
			{"id with a space", []byte(`{"v":1,"id":"a b"}`), invalid},
			{"id unicode", []byte(`{"v":1,"id":"ünï"}`), invalid},
			{"id of 65 characters", []byte(`{"v":1,"id":"` + repeat("s", 65) + `"}`), invalid},
			{"id empty", []byte(`{"v":1,"id":""}`), invalid},
			{"id with braces (a Redis hash tag)", []byte(`{"v":1,"id":"}{"}`), invalid},
			{"id null", []byte(`{"v":1,"id":null}`), invalid},
			{"id an array", []byte(`{"v":1,"id":["src-granted"]}`), invalid},
			{"no id", []byte(`{"v":1}`), invalid},
			{"unicode-heavy id", []byte(`{"v":1,"id":"` + unicodeText + `"}`), invalid},
			{"the revoked source again: ok, nothing changes", []byte(`{"v":1,"id":"src-revoked"}`), okReply},
		} {
			add(g, subj, replyPlain, c.name, c.body, c.want, nil)
		}
	}

	// teamster.worker.<workerId>.control.
	{
		const g = "teamster.worker.<workerId>.control"
		subj := "teamster.worker.w1.control"
		generic(g, subj, replyControl)
		op := func(v string) []byte { return []byte(`{"v":1,"op":` + v + `}`) }
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
		}{
			{"op explode", subj, op(`"explode"`), invalid},
			{"op DRAIN", subj, op(`"DRAIN"`), invalid},
			{"op drain with a trailing space", subj, op(`"drain "`), invalid},
			{"op drain in fullwidth letters", subj, op(`"ｄｒａｉｎ"`), invalid},
			{"op kill", subj, op(`"kill"`), invalid},
			{"op shutdown", subj, op(`"shutdown"`), invalid},
			{"op empty", subj, op(`""`), invalid},
			{"no op", subj, []byte(`{"v":1}`), invalid},
			{"op a number", subj, op(`1`), invalid},
			{"op null", subj, op(`null`), invalid},
			{"op a list", subj, op(`["drain"]`), invalid},
			{"op drain, v 2", subj, []byte(`{"v":2,"op":"drain"}`), invalid},
			{"op unicode-heavy", subj, op(fmt.Sprintf("%q", unicodeText)), invalid},
			{"resume a worker that is not draining", subj, op(`"resume"`), invalid},
			{"status: ok, nothing changes", subj, op(`"status"`), okReply},
			{"a worker that does not exist", "teamster.worker.nobody.control", op(`"drain"`), noResponders},
			{"workerId * (literal)", "teamster.worker.*.control", op(`"drain"`), noResponders},
			{"teamster.worker.> (literal)", "teamster.worker.>", op(`"drain"`), noResponders},
			{"an extra token", subj + ".x", op(`"drain"`), noResponders},
		} {
			add(g, c.subject, replyControl, c.name, c.body, c.want, nil)
		}
	}

	// teamster.harness.<harnessId>.reset (the router's call after a session
	// reset or delete; any worker hosting the harness answers).
	{
		const g = "teamster.harness.<harnessId>.reset"
		subj, _ := bus.HarnessResetSubject("codex")
		generic(g, subj, replyPlain)
		for _, c := range []struct {
			name, subject string
			body          []byte
			want          outcome
			header        nats.Header
		}{
			{"no sessionKey", subj, []byte(`{"v":1}`), invalid, nil},
			{"sessionKey empty", subj, []byte(`{"v":1,"sessionKey":""}`), invalid, nil},
			{"sessionKey of 1025 bytes", subj, []byte(`{"v":1,"sessionKey":"` + repeat("k", 1025) + `"}`), invalid, nil},
			{"sessionKey with NUL", subj, []byte(`{"v":1,"sessionKey":"a\u0000b"}`), invalid, nil},
			{"sessionKey a number", subj, []byte(`{"v":1,"sessionKey":1}`), invalid, nil},
			{"binding truncated", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":{"thread":`), invalid, nil},
			{"binding 100,000 levels deep", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":` + repeat("[", 100_000) + repeat("]", 100_000) + `}`), invalid, nil},
			{"the locked session: ok, the scripted harness keeps no native state", subj, []byte(`{"v":1,"sessionKey":"hostile:locked","binding":{"thread":"t"}}`), okReply, nil},
			{"the running session, from a delegate: ok (no identity check; see the report)", subj, []byte(`{"v":1,"sessionKey":"hostile:running-v2"}`), okReply, delegateHeader("voice-call")},
			{"a harness nobody hosts", "teamster.harness.ghost.reset", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
			{"harnessId * (literal)", "teamster.harness.*.reset", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
			{"an extra token", subj + ".x", []byte(`{"v":1,"sessionKey":"hostile:locked"}`), noResponders, nil},
		} {
			add(g, c.subject, replyPlain, c.name, c.body, c.want, c.header)
		}
	}
	return cases
}
