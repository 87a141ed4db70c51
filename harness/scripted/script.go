package scripted

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
)

// scriptPrefix marks a prompt that is a script rather than text to echo.
const scriptPrefix = `{"script":`

// maxWaitMs bounds sleep and awaitInjection: the longest attempt timeout.
const maxWaitMs = 86_400_000

// Step names.
const (
	stepSay            = "say"
	stepReason         = "reason"
	stepPlan           = "plan"
	stepSleep          = "sleep"
	stepTool           = "tool"
	stepUsage          = "usage"
	stepAwaitInjection = "awaitInjection"
	stepAsk            = "ask"
	stepWrite          = "write"
	stepFail           = "fail"
)

// step is one parsed script step. Kind is one of the step names; the other
// fields hold its value.
type step struct {
	kind string
	text string // say, reason, plan, fail
	n    int64  // sleep, usage, awaitInjection
	tool toolStep
	ask  askStep
	file writeStep
	// responseID is a usage step's explicit response id (the object form
	// {"responseId": id, "outputTokens": n}); empty for the number form.
	responseID string
}

// askStep is the value of an ask step: a blocking question to the user.
type askStep struct {
	question string
	choices  []string
}

// writeStep is the value of a write step: a file (or a symlink) in the
// harness's workspace.
type writeStep struct {
	path    string
	data    []byte
	symlink string // the link's target, for a symlink
}

// toolStep is the value of a tool step.
type toolStep struct {
	name string
	args json.RawMessage
	// quiet keeps the result out of the assistant texts (a tool-only turn).
	quiet bool
}

// parsePrompt returns the steps a prompt plays: its script, or one say step
// echoing it.
func parsePrompt(prompt string) ([]step, error) {
	trimmed := strings.TrimLeft(prompt, " \t\r\n")
	if !strings.HasPrefix(trimmed, scriptPrefix) {
		return []step{{kind: stepSay, text: prompt}}, nil
	}
	return parseScript([]byte(trimmed))
}

// parseScript parses a whole script, so that a malformed one fails before
// any step runs.
func parseScript(b []byte) ([]step, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, failed("the script is not a valid JSON object: %v", err)
	}
	raw := top["script"]
	if !isKind(raw, '[') {
		return nil, failed("field script is not a list of steps")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, failed("field script is not a list of steps: %v", err)
	}
	steps := make([]step, 0, len(items))
	for i, item := range items {
		s, err := parseStep(item)
		if err != nil {
			return nil, failed("script[%d]: %s", i, err)
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// stepError is why one step does not parse; parseScript adds its index.
type stepError string

func (e stepError) Error() string { return string(e) }

// parseStep parses one step: an object with exactly one known key whose value
// has the step's type.
func parseStep(raw json.RawMessage) (step, error) {
	if !isKind(raw, '{') {
		return step{}, stepError("a step is an object with one key")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return step{}, stepError("a step is an object with one key")
	}
	if len(m) != 1 {
		return step{}, stepError("a step is an object with exactly one key")
	}
	var kind string
	var v json.RawMessage
	for k, val := range m {
		kind, v = k, val
	}
	s := step{kind: kind}
	var err error
	switch kind {
	case stepSay, stepReason, stepPlan, stepFail:
		s.text, err = stringValue(kind, v)
	case stepSleep, stepAwaitInjection:
		s.n, err = intValue(kind, v)
		if err == nil && (s.n < 0 || s.n > maxWaitMs) {
			err = stepError(kind + " takes milliseconds from 0 to 86400000")
		}
	case stepUsage:
		if isKind(v, '{') {
			s.responseID, s.n, err = usageValue(v)
		} else {
			s.n, err = intValue(kind, v)
		}
	case stepTool:
		s.tool, err = toolValue(v)
	case stepAsk:
		s.ask, err = askValue(v)
	case stepWrite:
		s.file, err = writeValue(v)
	default:
		err = stepError("unknown step " + quote(kind))
	}
	return s, err
}

// usageValue parses the object form of a usage step, {"responseId": id,
// "outputTokens": n}: it reports the same response twice when a script asks
// for it, to show that the host counts a response once.
func usageValue(v json.RawMessage) (string, int64, error) {
	var u struct {
		ResponseID   *string `json:"responseId"`
		OutputTokens *int64  `json:"outputTokens"`
	}
	if err := json.Unmarshal(v, &u); err != nil || u.ResponseID == nil || *u.ResponseID == "" || u.OutputTokens == nil {
		return "", 0, stepError("usage takes a number or {\"responseId\": id, \"outputTokens\": n}")
	}
	return *u.ResponseID, *u.OutputTokens, nil
}

// askValue parses {"question": q, "choices": [...]}: question a non-empty
// string, choices absent, null or a list of strings.
func askValue(v json.RawMessage) (askStep, error) {
	var a struct {
		Question json.RawMessage `json:"question"`
		Choices  []string        `json:"choices"`
	}
	if !isKind(v, '{') || json.Unmarshal(v, &a) != nil {
		return askStep{}, stepError("ask takes an object {question, choices}")
	}
	q, err := stringValue("ask.question", a.Question)
	if err != nil {
		return askStep{}, err
	}
	if q == "" {
		return askStep{}, stepError("ask.question is empty")
	}
	return askStep{question: q, choices: a.Choices}, nil
}

// writeValue parses {"path": p, "text": t}, {"path": p, "base64": b} or
// {"path": p, "symlink": target}: path relative and inside the workspace,
// exactly one of the others.
func writeValue(v json.RawMessage) (writeStep, error) {
	var w struct {
		Path    *string `json:"path"`
		Text    *string `json:"text"`
		Base64  *string `json:"base64"`
		Symlink *string `json:"symlink"`
	}
	const form = "write takes {path, text}, {path, base64} or {path, symlink}"
	if !isKind(v, '{') || json.Unmarshal(v, &w) != nil || w.Path == nil {
		return writeStep{}, stepError(form)
	}
	if !bus.LocalPath(*w.Path) {
		return writeStep{}, stepError("write.path " + quote(*w.Path) + " is not a relative path inside the workspace")
	}
	s := writeStep{path: *w.Path}
	n := 0
	if w.Text != nil {
		s.data, n = []byte(*w.Text), n+1
	}
	if w.Base64 != nil {
		b, err := base64.StdEncoding.DecodeString(*w.Base64)
		if err != nil {
			return writeStep{}, stepError("write.base64 is not base64")
		}
		s.data, n = b, n+1
	}
	if w.Symlink != nil {
		s.symlink, n = *w.Symlink, n+1
	}
	if n != 1 || (w.Symlink != nil && s.symlink == "") {
		return writeStep{}, stepError(form)
	}
	return s, nil
}

// toolValue parses {"name": n, "args": {...}}: name a non-empty string, args
// absent, null or an object. Other keys are ignored, as readers of every
// teamster envelope ignore unknown fields.
func toolValue(v json.RawMessage) (toolStep, error) {
	if !isKind(v, '{') {
		return toolStep{}, stepError("tool takes an object {name, args}")
	}
	var t struct {
		Name  json.RawMessage `json:"name"`
		Args  json.RawMessage `json:"args"`
		Quiet bool            `json:"quiet"`
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return toolStep{}, stepError("tool takes an object {name, args}")
	}
	name, err := stringValue("tool.name", t.Name)
	if err != nil {
		return toolStep{}, err
	}
	if name == "" {
		return toolStep{}, stepError("tool.name is empty")
	}
	var args json.RawMessage
	if len(t.Args) > 0 && string(t.Args) != "null" {
		if !isKind(t.Args, '{') {
			return toolStep{}, stepError("tool.args is not an object")
		}
		args = t.Args
	}
	return toolStep{name: name, args: args, quiet: t.Quiet}, nil
}

// stringValue decodes a JSON string; null and every other type are refused.
func stringValue(field string, v json.RawMessage) (string, error) {
	var s string
	if !isKind(v, '"') || json.Unmarshal(v, &s) != nil {
		return "", stepError(field + " takes a string")
	}
	return s, nil
}

// intValue decodes a JSON integer that fits an int64; null, fractions and
// every other type are refused.
func intValue(field string, v json.RawMessage) (int64, error) {
	var n int64
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) || json.Unmarshal(v, &n) != nil {
		return 0, stepError(field + " takes an integer")
	}
	return n, nil
}

// isKind reports whether the JSON value v starts with the byte c (values
// inside a decoded object carry no leading whitespace).
func isKind(v json.RawMessage, c byte) bool { return len(v) > 0 && v[0] == c }

// quote quotes s for an error message, bounded to 40 runes.
func quote(s string) string {
	b, _ := json.Marshal(truncate(s, 40))
	return string(b)
}

// truncate bounds s to n runes.
func truncate(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// failed is a harness_failed error.
func failed(format string, args ...any) *teamster.Error {
	return teamster.Errorf(teamster.CodeHarnessFailed, "scripted: "+format, args...)
}
