package selection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ConfigError is a runtime policy config that cannot be used: it does not
// parse, a key has the wrong type, or a value is invalid. Its text names the
// file, the line and the key path, for example
//
//	policy.json:12: models.providers.openai.agentRuntime.id: want a string, got number
type ConfigError struct {
	File string // the name given to ParsePolicy, or LoadPolicy's path
	Line int    // 1-based line of the offending value
	Path string // key path, for example agents.list[0].models["openai/gpt-5"]; "" for syntax errors
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Path, e.Msg)
}

// LoadPolicy reads the runtime policy config at path. An empty path means no
// config: everything is auto. A path that does not exist is an error (a
// mistyped path must not silently turn every explicit runtime into auto); an
// empty file is a valid, empty policy.
func LoadPolicy(path string) (*Policy, error) {
	if path == "" {
		return &Policy{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("selection: read runtime policy: %w", err)
	}
	return ParsePolicy(path, data)
}

// ParsePolicy reads a runtime policy from an OpenClaw-format JSON config; name
// is used in errors and notes (usually the file path). It reads
//
//	models.providers.<p>.agentRuntime.id
//	models.providers.<p>.models[].id and .agentRuntime.id
//	agents.defaults.models["<p>/<m>"|"<p>/*"].agentRuntime.id
//	agents.list[].id and .models["<p>/<m>"|"<p>/*"].agentRuntime.id
//
// and ignores every other key (OpenClaw configs carry much more). The legacy
// whole-agent agents.defaults.agentRuntime and agents.list[].agentRuntime are
// ignored with a note in every record they would have applied to. Empty input
// and a top-level null are an empty policy.
//
// Errors are *ConfigError: invalid JSON (strict JSON: no comments, no
// trailing commas), a key of the wrong type, a runtime id that does not match
// ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$, an agent or provider model entry without
// an id or with an id used twice in one list, and a model key that sets a
// runtime but is not "<provider>/<model>" or "<provider>/*". A null value
// counts as absent. Duplicate object keys follow JSON.parse: the last wins.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	p := &Policy{}
	if len(bytes.TrimSpace(data)) == 0 {
		return p, nil
	}
	// Validate the whole input first: the decoder's syntax errors inside a
	// value carry offsets relative to that value, Unmarshal's are absolute.
	if err := json.Unmarshal(data, new(json.RawMessage)); err != nil {
		ps := parser{name: name, data: data}
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, ps.errAt(syn.Offset, "", "invalid JSON: %s", syn.Error())
		}
		return nil, ps.errAt(int64(len(data)), "", "invalid JSON: %s", err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	ps := parser{name: name, data: data, dec: dec, p: p}
	if err := ps.object("", ps.root); err != nil {
		return nil, err
	}
	return p, nil
}

// parser walks the token stream of a config that is known to be valid JSON,
// builds the Policy and reports type errors with their line and key path.
type parser struct {
	name string
	data []byte
	dec  *json.Decoder
	p    *Policy
}

// root handles the top-level keys.
func (ps *parser) root(key, path string) error {
	switch key {
	case "models":
		return ps.object(path, ps.models)
	case "agents":
		return ps.object(path, ps.agents)
	default:
		_, _, err := ps.skip()
		return err
	}
}

// models handles the keys of the top-level "models" object.
func (ps *parser) models(key, path string) error {
	if key != "providers" {
		_, _, err := ps.skip()
		return err
	}
	return ps.object(path, ps.provider)
}

// provider reads one models.providers.<p> entry; a repeated key replaces the
// earlier entry.
func (ps *parser) provider(name, path string) error {
	var pp providerPolicy
	seen := map[string]int{} // model id → line, for duplicates
	err := ps.object(path, func(key, kpath string) error {
		switch key {
		case "agentRuntime":
			s, err := ps.runtime(kpath)
			pp.runtime = s
			return err
		case "models":
			return ps.array(kpath, func(i int, epath string) error {
				return ps.providerModel(&pp, seen, epath)
			})
		default:
			_, _, err := ps.skip()
			return err
		}
	})
	if err != nil {
		return err
	}
	if ps.p.providers == nil {
		ps.p.providers = map[string]providerPolicy{}
	}
	ps.p.providers[normalizeID(name)] = pp
	return nil
}

// providerModel reads one models.providers.<p>.models[] row.
func (ps *parser) providerModel(pp *providerPolicy, seen map[string]int, path string) error {
	ok, line, err := ps.open(path, '{')
	if err != nil || !ok {
		if err == nil {
			err = ps.errLine(line, path, "want an object, got null")
		}
		return err
	}
	var id string
	idLine := line
	var s setting
	err = ps.members(path, func(key, kpath string) error {
		switch key {
		case "id":
			v, l, err := ps.str(kpath)
			id, idLine = v, l
			return err
		case "agentRuntime":
			var err error
			s, err = ps.runtime(kpath)
			return err
		default:
			_, _, err := ps.skip()
			return err
		}
	})
	if err != nil {
		return err
	}
	if id == "" {
		return ps.errLine(line, path, "model entry has no id")
	}
	if first, dup := seen[id]; dup {
		return ps.errLine(idLine, path+".id", "model id %q is listed twice (first at line %d)", id, first)
	}
	seen[id] = idLine
	if s.set() {
		if pp.models == nil {
			pp.models = map[string]setting{}
		}
		pp.models[id] = s
	}
	return nil
}

// agents handles the keys of the top-level "agents" object.
func (ps *parser) agents(key, path string) error {
	switch key {
	case "defaults":
		return ps.object(path, func(key, kpath string) error {
			switch key {
			case "models":
				return ps.modelMap(kpath, &ps.p.defaults)
			case "agentRuntime":
				note, err := ps.legacy(kpath)
				ps.p.legacyDefaults = note
				return err
			default:
				_, _, err := ps.skip()
				return err
			}
		})
	case "list":
		seen := map[string]int{} // normalized agent id → line
		return ps.array(path, func(i int, epath string) error {
			return ps.agent(seen, epath)
		})
	default:
		_, _, err := ps.skip()
		return err
	}
}

// agent reads one agents.list[] entry.
func (ps *parser) agent(seen map[string]int, path string) error {
	ok, line, err := ps.open(path, '{')
	if err != nil || !ok {
		if err == nil {
			err = ps.errLine(line, path, "want an object, got null")
		}
		return err
	}
	var id, legacy string
	idLine := line
	var ap agentPolicy
	err = ps.members(path, func(key, kpath string) error {
		switch key {
		case "id":
			v, l, err := ps.str(kpath)
			id, idLine = v, l
			return err
		case "models":
			return ps.modelMap(kpath, &ap.models)
		case "agentRuntime":
			var err error
			legacy, err = ps.legacy(kpath)
			return err
		default:
			_, _, err := ps.skip()
			return err
		}
	})
	if err != nil {
		return err
	}
	key := normalizeID(id)
	if key == "" {
		return ps.errLine(line, path, "agent entry has no id")
	}
	if first, dup := seen[key]; dup {
		return ps.errLine(idLine, path+".id", "agent id %q is listed twice (first at line %d)", id, first)
	}
	seen[key] = idLine
	if legacy != "" {
		ap.legacy = legacy + " (agent " + strconv.Quote(id) + ")"
	}
	if ps.p.agents == nil {
		ps.p.agents = map[string]agentPolicy{}
	}
	ps.p.agents[key] = ap
	return nil
}

// modelMap reads a "models" map of agents.defaults or of an agent entry:
// keys "<provider>/<model>" or "<provider>/*", values objects that may carry
// agentRuntime.id.
func (ps *parser) modelMap(path string, ms *modelSettings) error {
	return ps.object(path, func(ref, rpath string) error {
		return ps.object(rpath, func(key, kpath string) error {
			if key != "agentRuntime" {
				_, _, err := ps.skip()
				return err
			}
			s, err := ps.runtime(kpath)
			if err != nil || !s.set() {
				return err
			}
			provider, model, ok := splitModelRef(ref)
			if !ok {
				return ps.errAt(ps.dec.InputOffset(), rpath, "a model key that sets agentRuntime must be \"<provider>/<model>\" or \"<provider>/*\"")
			}
			provider = normalizeID(provider)
			if model == "*" {
				if ms.wildcard == nil {
					ms.wildcard = map[string]setting{}
				}
				ms.wildcard[provider] = s
				return nil
			}
			if ms.exact == nil {
				ms.exact = map[string]map[string]setting{}
			}
			if ms.exact[provider] == nil {
				ms.exact[provider] = map[string]setting{}
			}
			ms.exact[provider][model] = s
			return nil
		})
	})
}

// splitModelRef splits "provider/model" at the first slash. The provider and
// the model must be non-empty; "*" is allowed only as the whole model part.
func splitModelRef(ref string) (provider, model string, ok bool) {
	provider, model, found := strings.Cut(ref, "/")
	if !found || strings.TrimSpace(provider) == "" || model == "" || strings.Contains(provider, "*") {
		return "", "", false
	}
	if model != "*" && strings.Contains(model, "*") {
		return "", "", false
	}
	return provider, model, true
}

// runtime reads an agentRuntime object and returns its id as a setting. An
// absent or null id, and the id "default", are "not set".
func (ps *parser) runtime(path string) (setting, error) {
	var s setting
	err := ps.object(path, func(key, kpath string) error {
		if key != "id" {
			_, _, err := ps.skip()
			return err
		}
		v, line, err := ps.str(kpath)
		if err != nil {
			return err
		}
		if v == "" && line == 0 { // null
			s = setting{}
			return nil
		}
		if !idPattern.MatchString(v) {
			return ps.errLine(line, kpath, "%q is not a valid runtime id (want %s)", v, idPattern)
		}
		if v == RuntimeDefault {
			s = setting{}
			return nil
		}
		s = setting{runtime: v, origin: fmt.Sprintf("%s:%d: %s", ps.name, line, kpath)}
		return nil
	})
	return s, err
}

// legacy skips a legacy whole-agent agentRuntime value and returns the note
// for the record, "" when the value is null.
func (ps *parser) legacy(path string) (string, error) {
	kind, line, err := ps.skip()
	if err != nil || kind == "null" {
		return "", err
	}
	return fmt.Sprintf("%s:%d: %s is a legacy whole-agent runtime and is ignored; "+
		"set agentRuntime.id per model (agents.defaults.models[\"<provider>/<model>\"]) "+
		"or per provider (models.providers.<provider>)", ps.name, line, path), nil
}

// object reads an object value (null counts as absent) and calls fn for each
// member with the key and the member's key path; fn must consume the value.
func (ps *parser) object(path string, fn func(key, path string) error) error {
	ok, _, err := ps.open(path, '{')
	if err != nil || !ok {
		return err
	}
	return ps.members(path, fn)
}

// members iterates the members of an object whose '{' has been read, then
// reads its '}'.
func (ps *parser) members(path string, fn func(key, path string) error) error {
	for ps.dec.More() {
		tok, err := ps.dec.Token()
		if err != nil {
			return ps.decodeErr(path, err)
		}
		key, ok := tok.(string)
		if !ok {
			return ps.errAt(ps.dec.InputOffset(), path, "want an object key, got %s", kindOf(tok))
		}
		if err := fn(key, joinKey(path, key)); err != nil {
			return err
		}
	}
	if _, err := ps.dec.Token(); err != nil {
		return ps.decodeErr(path, err)
	}
	return nil
}

// array reads an array value (null counts as absent) and calls fn for each
// element with its index and key path; fn must consume the element.
func (ps *parser) array(path string, fn func(i int, path string) error) error {
	ok, _, err := ps.open(path, '[')
	if err != nil || !ok {
		return err
	}
	for i := 0; ps.dec.More(); i++ {
		if err := fn(i, path+"["+strconv.Itoa(i)+"]"); err != nil {
			return err
		}
	}
	if _, err := ps.dec.Token(); err != nil {
		return ps.decodeErr(path, err)
	}
	return nil
}

// open reads the next token and checks that it opens the wanted kind of value
// ('{' or '['). It returns false with no error for null, and the line of the
// token.
func (ps *parser) open(path string, want json.Delim) (bool, int, error) {
	tok, err := ps.dec.Token()
	if err != nil {
		return false, 0, ps.decodeErr(path, err)
	}
	line := ps.line(ps.dec.InputOffset())
	if tok == nil {
		return false, line, nil
	}
	if d, ok := tok.(json.Delim); ok && d == want {
		return true, line, nil
	}
	wantKind := "an object"
	if want == '[' {
		wantKind = "an array"
	}
	return false, line, ps.errLine(line, path, "want %s, got %s", wantKind, kindOf(tok))
}

// str reads a string value. For null it returns "" and line 0.
func (ps *parser) str(path string) (string, int, error) {
	tok, err := ps.dec.Token()
	if err != nil {
		return "", 0, ps.decodeErr(path, err)
	}
	line := ps.line(ps.dec.InputOffset())
	switch v := tok.(type) {
	case nil:
		return "", 0, nil
	case string:
		return v, line, nil
	default:
		return "", line, ps.errLine(line, path, "want a string, got %s", kindOf(tok))
	}
}

// skip consumes the next value whatever it is and returns its kind and the
// line where it starts.
func (ps *parser) skip() (string, int, error) {
	depth := 0
	kind, line := "", 0
	for {
		tok, err := ps.dec.Token()
		if err != nil {
			return "", 0, ps.decodeErr("", err)
		}
		if kind == "" {
			kind, line = kindOf(tok), ps.line(ps.dec.InputOffset())
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			default:
				depth--
			}
		}
		if depth == 0 {
			return kind, line, nil
		}
	}
}

// kindOf names the JSON kind of a token, as errors print it.
func kindOf(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case json.Number, float64:
		return "number"
	case bool:
		return "boolean"
	case json.Delim:
		switch v {
		case '{':
			return "object"
		case '[':
			return "array"
		case '}':
			return "end of object"
		default:
			return "end of array"
		}
	default:
		return fmt.Sprintf("%T", tok)
	}
}

// joinKey appends an object key to a key path: ".key" for plain keys,
// `["key"]` for keys with other characters (model refs like "openai/gpt-5").
func joinKey(path, key string) string {
	plain := key != ""
	for i := 0; i < len(key) && plain; i++ {
		c := key[i]
		plain = c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

// line returns the 1-based line of the byte just before offset, which is the
// last byte of the token the decoder has just returned.
func (ps *parser) line(offset int64) int {
	if offset > int64(len(ps.data)) {
		offset = int64(len(ps.data))
	}
	if offset > 0 {
		offset--
	}
	return 1 + bytes.Count(ps.data[:offset], []byte{'\n'})
}

func (ps *parser) errAt(offset int64, path, format string, args ...any) *ConfigError {
	return ps.errLine(ps.line(offset), path, format, args...)
}

func (ps *parser) errLine(line int, path, format string, args ...any) *ConfigError {
	return &ConfigError{File: ps.name, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// decodeErr wraps a decoder error, which cannot happen on input that passed
// validation, but is reported rather than trusted away.
func (ps *parser) decodeErr(path string, err error) *ConfigError {
	return ps.errAt(ps.dec.InputOffset(), path, "invalid JSON: %s", err.Error())
}
