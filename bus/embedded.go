package bus

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerMaxPayload is the max_payload teamster's NATS servers run with (8 MiB),
// so that bodies between MaxBody and it reach the router, which refuses them
// with payload_too_large instead of the bus dropping them.
const ServerMaxPayload = 8 << 20

// EmbeddedOptions configures an in-process NATS server with JetStream.
type EmbeddedOptions struct {
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free port, -1 listens on none
	// (in-process connections only).
	Port int
	// StoreDir is JetStream's file store directory. Required.
	StoreDir string
	// ServerName names the server in logs and in JetStream; default "teamster".
	ServerName string
	// Logger, when set, receives the server's notices and errors.
	Logger server.Logger
	// ReadyTimeout bounds start-up; default 30s.
	ReadyTimeout time.Duration
	// Configure, when set, changes the server's options last, before the
	// server is made: accounts and users, TLS (`teamster dev --secure`).
	// Without it the server has no authentication and no TLS.
	Configure func(*server.Options)
}

// StartEmbedded starts a NATS server with JetStream in this process and waits
// until it accepts connections. Callers Shutdown it; its store survives in
// StoreDir, so a server started again on the same directory keeps its streams.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, fmt.Errorf("embedded nats: StoreDir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.ServerName == "" {
		o.ServerName = "teamster"
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 30 * time.Second
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       o.Host,
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		MaxPayload: ServerMaxPayload,
		// A large body must not stall the connection that carried it.
		MaxPending: 64 << 20,
		NoSigs:     true,
		NoLog:      o.Logger == nil,
	}
	switch {
	case o.Port == 0:
		opts.Port = server.RANDOM_PORT // the server's 0 means its default, 4222
	case o.Port < 0:
		opts.DontListen = true
		opts.Port = 0
	}
	if o.Configure != nil {
		o.Configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if o.Logger != nil {
		s.SetLoggerV2(o.Logger, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after %s", o.ReadyTimeout)
	}
	return s, nil
}
