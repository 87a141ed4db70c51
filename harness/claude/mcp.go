package claude

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// The gateway's tools reach the model through an MCP server the harness
// runs for the turn: streamable HTTP on a loopback port of its own, at a
// path holding a random token and answering only requests that also carry
// that token as a bearer header (the CLI's --mcp-config "headers"). The
// server answers each JSON-RPC request with one JSON body (no SSE stream, no
// session id), which the CLI's MCP client accepts: initialize, tools/list,
// tools/call, ping; notifications are acknowledged with 202; GET (a
// server-to-client stream) is 405.

// mcpServerName is the server's name in the CLI's MCP config; the model
// sees the tools as mcp__teamster__<tool>.
const mcpServerName = "teamster"

// mcpProtocolVersion is the version the server answers when the client asks
// for one it does not know.
const mcpProtocolVersion = "2025-06-18"

var mcpVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

// mcpMaxBody bounds one request body.
const mcpMaxBody = 16 << 20

type mcpServer struct {
	t     *turn
	ln    net.Listener
	srv   *http.Server
	token string
	// names maps the MCP tool names to the attempt's tool names (MCP tool
	// names are letters, digits, "_" and "-", at most 64 of them).
	names map[string]string
	order []string
}

// startMCP starts the turn's MCP server on 127.0.0.1.
func startMCP(t *turn) (*mcpServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &mcpServer{t: t, ln: ln, token: randomToken(24), names: map[string]string{}}
	for _, tool := range t.run.Attempt.Tools {
		if !t.tools[tool.Name] {
			continue
		}
		n := mcpName(tool.Name)
		for i := 2; m.names[n] != ""; i++ {
			n = fmt.Sprintf("%s_%d", mcpName(tool.Name)[:min(len(mcpName(tool.Name)), 60)], i)
		}
		m.names[n] = tool.Name
		m.order = append(m.order, n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp/"+m.token, m.serve)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// mcpName is an MCP-safe tool name for name.
func mcpName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" {
		s = "tool"
	}
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

func (m *mcpServer) url() string { return "http://" + m.ln.Addr().String() + "/mcp/" + m.token }

// config is the CLI's --mcp-config file.
func (m *mcpServer) config() []byte {
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{mcpServerName: map[string]any{
		"type": "http", "url": m.url(), "headers": map[string]string{"Authorization": "Bearer " + m.token}}}})
	return b
}

// allowedNames are the tools' names as --allowedTools takes them.
func (m *mcpServer) allowedNames() []string {
	out := make([]string, 0, len(m.order))
	for _, n := range m.order {
		out = append(out, "mcp__"+mcpServerName+"__"+n)
	}
	return out
}

func (m *mcpServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		_ = m.srv.Close()
	}
}

type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
}

type rpcReply struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcErr         `json:"error,omitempty"`
}

type rpcErr struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (m *mcpServer) serve(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if subtle.ConstantTimeCompare([]byte(auth), []byte("Bearer "+m.token)) != 1 {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, mcpMaxBody))
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	var msgs []rpcMessage
	batch := len(body) > 0 && strings.HasPrefix(strings.TrimSpace(string(body)), "[")
	if batch {
		err = json.Unmarshal(body, &msgs)
	} else {
		var one rpcMessage
		err = json.Unmarshal(body, &one)
		msgs = []rpcMessage{one}
	}
	if err != nil {
		writeJSON(w, rpcReply{JSONRPC: "2.0", ID: json.RawMessage("null"), Error: &rpcErr{Code: -32700, Message: "parse error"}})
		return
	}
	var replies []rpcReply
	for _, msg := range msgs {
		if len(msg.ID) == 0 || msg.Method == "" {
			continue // a notification or a response: nothing to answer
		}
		res, rerr := m.answer(r.Context(), msg)
		replies = append(replies, rpcReply{JSONRPC: "2.0", ID: msg.ID, Result: res, Error: rerr})
	}
	switch {
	case len(replies) == 0:
		w.WriteHeader(http.StatusAccepted)
	case batch:
		writeJSON(w, replies)
	default:
		writeJSON(w, replies[0])
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (m *mcpServer) answer(ctx context.Context, msg rpcMessage) (any, *rpcErr) {
	switch msg.Method {
	case "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		v := mcpProtocolVersion
		for _, known := range mcpVersions {
			if p.ProtocolVersion == known {
				v = known
			}
		}
		return map[string]any{"protocolVersion": v, "capabilities": map[string]any{"tools": map[string]any{"listChanged": false}},
			"serverInfo":   map[string]any{"name": mcpServerName, "version": "1"},
			"instructions": "Tools of the gateway that runs this conversation."}, nil
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		return map[string]any{"tools": m.list()}, nil
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Meta      map[string]any  `json:"_meta"`
		}
		if err := json.Unmarshal(msg.Params, &p); err != nil {
			return nil, &rpcErr{Code: -32602, Message: "tools/call params do not decode"}
		}
		callID, _ := p.Meta["claudecode/toolUseId"].(string)
		if callID == "" {
			callID = "mcp-" + strings.Trim(string(msg.ID), `"`)
		}
		name, ok := m.names[p.Name]
		if !ok {
			name = p.Name
		}
		text, isError := m.t.toolCall(ctx, callID, name, ok, p.Arguments)
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}, "isError": isError}, nil
	default:
		return nil, &rpcErr{Code: -32601, Message: "method not found: " + msg.Method}
	}
}

// list is the tools/list answer: the offered tools, each with an object
// input schema.
func (m *mcpServer) list() []any {
	byName := map[string]int{}
	for i, tool := range m.t.run.Attempt.Tools {
		byName[tool.Name] = i
	}
	out := make([]any, 0, len(m.order))
	for _, n := range m.order {
		tool := m.t.run.Attempt.Tools[byName[m.names[n]]]
		schema := tool.InputSchema
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		entry := map[string]any{"name": n, "inputSchema": schema}
		if tool.Description != "" {
			entry["description"] = tool.Description
		}
		out = append(out, entry)
	}
	return out
}
