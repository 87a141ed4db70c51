package redisproc

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ACLDenials reads the reply of ACL LOG, which cmd ran: one line per
// refusal, "<user>: <reason> <object> (<context>)". CLIENT SETINFO, which
// go-redis sends on every new connection and does without when refused, is
// left out: the generated users may not run it (internal/credentials).
func ACLDenials(cmd *redis.Cmd) ([]string, error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("ACL LOG: %w", err)
	}
	var out []string
	for _, e := range v {
		m := map[string]string{}
		switch e := e.(type) {
		case map[any]any: // RESP3
			for k, v := range e {
				m[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any: // RESP2: key, value, ...
			for i := 0; i+1 < len(e); i += 2 {
				m[fmt.Sprint(e[i])] = fmt.Sprint(e[i+1])
			}
		}
		if m["object"] == "client|setinfo" {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s %s (%s)", m["username"], m["reason"], m["object"], m["context"]))
	}
	return out, nil
}
