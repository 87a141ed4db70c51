// Package cmdutil holds what the three commands share: settings from flags
// and TEAMSTER_* environment variables, the logger, and the NATS and Redis
// connections of a daemon.
package cmdutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"

	"github.com/teamster-fleet/teamster/leases"
)

// Environment variables and their defaults (docs/PROTOCOL.md, "Running it").
const (
	EnvNATSURL       = "TEAMSTER_NATS_URL"
	EnvRedisURL      = "TEAMSTER_REDIS_URL"
	EnvRedisMode     = "TEAMSTER_REDIS_MODE"
	EnvLogLevel      = "TEAMSTER_LOG_LEVEL"
	EnvLogFormat     = "TEAMSTER_LOG_FORMAT"
	EnvMetricsAddr   = "TEAMSTER_METRICS_ADDR"
	EnvRuntimeConfig = "TEAMSTER_RUNTIME_CONFIG"
	EnvRouterID      = "TEAMSTER_ROUTER_ID"
	EnvWorkerConfig  = "TEAMSTER_WORKER_CONFIG"
	EnvReplicas      = "TEAMSTER_STREAM_REPLICAS"
	EnvRetention     = "TEAMSTER_ATTEMPT_RETENTION"

	DefaultNATSURL  = "nats://127.0.0.1:4222"
	DefaultRedisURL = "redis://127.0.0.1:6379/0"
)

// The Redis modes (--redis-mode): how --redis-url is read and which go-redis
// client connects.
const (
	// RedisStandalone is one Redis: redis://[user:pass@]host:port/db,
	// rediss://... or unix:///path (redis.ParseURL, redis.NewClient).
	RedisStandalone = "standalone"
	// RedisSentinel is a primary found through Sentinels:
	// redis://[user:pass@]sentinel1:26379/db?master_name=NAME&addr=sentinel2:26379
	// (redis.ParseFailoverURL, redis.NewFailoverClient).
	RedisSentinel = "sentinel"
	// RedisCluster is a Redis Cluster:
	// redis://[user:pass@]seed1:7000?addr=seed2:7001 (redis.ParseClusterURL,
	// redis.NewClusterClient).
	RedisCluster = "cluster"
)

// clusterStateReload is how often a cluster-mode client reloads its slot
// map; see newRedis.
const clusterStateReload = time.Second

// Env returns the environment variable name, or def when it is unset or empty.
func Env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Common are the settings every command takes.
type Common struct {
	NATSURL   string
	RedisURL  string
	RedisMode string // RedisStandalone (also when empty), RedisSentinel or RedisCluster
	LogLevel  string
	LogFormat string
	// NATS authentication and TLS beyond what the URL carries.
	NATSCreds string
	NATSCA    string
	NATSCert  string
	NATSKey   string
	NATSNKey  string
	// NATSInbox is the connection's inbox prefix ("": nats.go's _INBOX, or
	// the gateway's own, _INBOX.gateway.<Gateway>, when Gateway is set).
	NATSInbox string
	// Gateway is the gateway (tenant) a command acts as ("": the unnamed
	// tenant); the CLI's --gateway.
	Gateway string
	// RedisPasswordFile holds the password of the URL's user, so that the
	// URL, which names no secret then, can sit in a committed file.
	RedisPasswordFile string
	// Redis TLS beyond what a rediss:// URL carries.
	RedisCA   string
	RedisCert string
	RedisKey  string
}

// AddCommon registers --nats-url, --redis-url, --redis-mode, --log-level,
// --log-format and the NATS and Redis credential and TLS flags, with
// defaults from the environment.
func AddCommon(fs *pflag.FlagSet, c *Common) {
	fs.StringVar(&c.NATSURL, "nats-url", Env(EnvNATSURL, DefaultNATSURL), "NATS server URL(s), comma-separated (env "+EnvNATSURL+")")
	fs.StringVar(&c.RedisURL, "redis-url", Env(EnvRedisURL, DefaultRedisURL), "Redis URL, redis:// or rediss:// (env "+EnvRedisURL+"); in sentinel mode the Sentinels' (master_name=NAME&addr=host:port for the others), in cluster mode seed nodes' (addr=host:port for the others)")
	fs.StringVar(&c.RedisMode, "redis-mode", Env(EnvRedisMode, RedisStandalone), "how to reach Redis: standalone, sentinel or cluster (env "+EnvRedisMode+")")
	fs.StringVar(&c.RedisPasswordFile, "redis-password-file", Env("TEAMSTER_REDIS_PASSWORD_FILE", ""), "file holding the password of --redis-url's user (in sentinel mode the Sentinels' and, without a password= parameter, the data nodes'), for a URL that carries none; one trailing newline is ignored (env TEAMSTER_REDIS_PASSWORD_FILE)")
	fs.StringVar(&c.RedisCA, "redis-tls-ca", Env("TEAMSTER_REDIS_TLS_CA", ""), "CA certificate(s) to verify Redis with a rediss:// URL (PEM; env TEAMSTER_REDIS_TLS_CA)")
	fs.StringVar(&c.RedisCert, "redis-tls-cert", Env("TEAMSTER_REDIS_TLS_CERT", ""), "client certificate for Redis mutual TLS (PEM; env TEAMSTER_REDIS_TLS_CERT)")
	fs.StringVar(&c.RedisKey, "redis-tls-key", Env("TEAMSTER_REDIS_TLS_KEY", ""), "client key for Redis mutual TLS (PEM; env TEAMSTER_REDIS_TLS_KEY)")
	fs.StringVar(&c.LogLevel, "log-level", Env(EnvLogLevel, "info"), "log level: debug, info, warn, error (env "+EnvLogLevel+")")
	fs.StringVar(&c.LogFormat, "log-format", Env(EnvLogFormat, "text"), "log format: text or json (env "+EnvLogFormat+")")
	fs.StringVar(&c.NATSCreds, "nats-creds", Env("TEAMSTER_NATS_CREDS", ""), "NATS credentials file (JWT and NKey seed; env TEAMSTER_NATS_CREDS)")
	fs.StringVar(&c.NATSNKey, "nats-nkey", Env("TEAMSTER_NATS_NKEY", ""), "NATS NKey seed file (env TEAMSTER_NATS_NKEY)")
	fs.StringVar(&c.NATSInbox, "nats-inbox-prefix", Env("TEAMSTER_NATS_INBOX_PREFIX", ""), "prefix of every reply subject this process asks for (default _INBOX); a deployment with per-principal permissions gives each principal its own, _INBOX.<role>.<name> (env TEAMSTER_NATS_INBOX_PREFIX)")
	fs.StringVar(&c.NATSCA, "nats-tls-ca", Env("TEAMSTER_NATS_TLS_CA", ""), "CA certificate(s) to verify the NATS server (PEM; env TEAMSTER_NATS_TLS_CA)")
	fs.StringVar(&c.NATSCert, "nats-tls-cert", Env("TEAMSTER_NATS_TLS_CERT", ""), "client certificate for NATS mutual TLS (PEM; env TEAMSTER_NATS_TLS_CERT)")
	fs.StringVar(&c.NATSKey, "nats-tls-key", Env("TEAMSTER_NATS_TLS_KEY", ""), "client key for NATS mutual TLS (PEM; env TEAMSTER_NATS_TLS_KEY)")
}

// natsAuth turns the credentials and TLS settings into connect options.
func (c *Common) natsAuth() ([]nats.Option, error) {
	var opts []nats.Option
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSNKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NATSNKey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, o)
	}
	switch {
	case c.NATSInbox != "":
		opts = append(opts, nats.CustomInboxPrefix(c.NATSInbox))
	case c.Gateway != "":
		opts = append(opts, nats.CustomInboxPrefix("_INBOX.gateway."+c.Gateway))
	}
	if c.NATSCA != "" {
		opts = append(opts, nats.RootCAs(c.NATSCA))
	}
	if (c.NATSCert == "") != (c.NATSKey == "") {
		return nil, fmt.Errorf("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.NATSCert != "" {
		opts = append(opts, nats.ClientCert(c.NATSCert, c.NATSKey))
	}
	return opts, nil
}

// Logger builds the logger the settings ask for.
func (c *Common) Logger() (*logrus.Logger, error) {
	l := logrus.New()
	lvl, err := logrus.ParseLevel(c.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	l.SetLevel(lvl)
	switch strings.ToLower(c.LogFormat) {
	case "json":
		l.SetFormatter(&logrus.JSONFormatter{})
	case "text", "":
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", c.LogFormat)
	}
	l.SetOutput(os.Stderr)
	// go-redis logs through the same logger, in its format. At debug: every
	// failure it logs (a dial that failed, a pool that could not connect)
	// also reaches its caller as an error, which logs it with its context,
	// and printing both says the same thing twice.
	redis.SetLogger(redisLog{l.WithField("component", "redis")})
	return l, nil
}

// redisLog is go-redis's logger on logrus.
type redisLog struct{ l logrus.FieldLogger }

func (r redisLog) Printf(_ context.Context, format string, args ...any) {
	r.l.Debug(strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// ConnectNATS connects to NATS and keeps reconnecting forever, logging
// disconnects and reconnects. The URL's credentials are never logged.
func (c *Common) ConnectNATS(name string, log logrus.FieldLogger) (*nats.Conn, error) {
	auth, err := c.natsAuth()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected: " + err.Error())
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats reconnected to " + nc.ConnectedUrlRedacted()) }),
		// Asynchronous errors (permission violations, slow consumers) go to
		// the log, not to stderr as plain text.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			l := log
			if sub != nil {
				l = l.WithField("subject", sub.Subject)
			}
			l.Error("nats: " + err.Error())
		}),
	}, auth...)
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redactURL(c.NATSURL), err)
	}
	return nc, nil
}

// Redis returns the Redis client of the settings (NewRedis) once Redis
// answers PING.
func (c *Common) Redis(ctx context.Context) (redis.UniversalClient, error) {
	rdb, where, err := c.newRedis()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("connect to Redis (%s): %w", where, err)
	}
	return rdb, nil
}

// NewRedis returns the Redis client of the settings without contacting
// Redis: a *redis.Client in standalone mode, a failover *redis.Client in
// sentinel mode, a *redis.ClusterClient in cluster mode.
//
// In sentinel mode the URL's user information authenticates to the
// Sentinels (go-redis's SentinelUsername and SentinelPassword); the
// primary and replicas take the username and password query parameters,
// and when the URL has neither, the Sentinels' user and password.
//
// In every mode a command ends at its context's deadline
// (ContextTimeoutEnabled): without it go-redis bounds a read only by its
// read timeout (3 s) and retries on a new connection, so a call on a Redis
// that stopped answering returned after some 12 s whatever its deadline.
// The keeper's renewal rounds and the router's answers to gateways rely on
// their deadlines.
func (c *Common) NewRedis() (redis.UniversalClient, error) {
	rdb, _, err := c.newRedis()
	return rdb, err
}

// newRedis is NewRedis, and where the client connects, for errors: the
// mode and the addresses, never a password.
func (c *Common) newRedis() (redis.UniversalClient, string, error) {
	mode := strings.ToLower(c.RedisMode)
	if mode == "" {
		mode = RedisStandalone
	}
	badURL := func(err error) error {
		var ue *url.Error
		if errors.As(err, &ue) { // its text holds the whole URL
			err = ue.Err
		}
		return fmt.Errorf("--redis-url %s (%s mode): %w", redactRedisURL(c.RedisURL), mode, err)
	}
	switch mode {
	case RedisStandalone:
		opts, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, "", badURL(err)
		}
		if err := c.redisPassword(&opts.Password); err != nil {
			return nil, "", err
		}
		if opts.TLSConfig, err = c.redisTLS(opts.TLSConfig); err != nil {
			return nil, "", err
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClient(opts), fmt.Sprintf("standalone mode, at %s", opts.Addr), nil
	case RedisSentinel:
		opts, err := redis.ParseFailoverURL(c.RedisURL)
		if err != nil {
			return nil, "", badURL(err)
		}
		if opts.MasterName == "" {
			return nil, "", badURL(errors.New("no master_name parameter: the name the Sentinels monitor the primary under"))
		}
		if err := c.redisPassword(&opts.SentinelPassword); err != nil {
			return nil, "", err
		}
		if q := mustQuery(c.RedisURL); !q.Has("username") && !q.Has("password") {
			opts.Username, opts.Password = opts.SentinelUsername, opts.SentinelPassword
		}
		if opts.TLSConfig, err = c.redisTLS(opts.TLSConfig); err != nil {
			return nil, "", err
		}
		opts.ContextTimeoutEnabled = true
		where := fmt.Sprintf("sentinel mode, master %q through the Sentinels %s", opts.MasterName, strings.Join(opts.SentinelAddrs, ", "))
		return redis.NewFailoverClient(opts), where, nil
	case RedisCluster:
		opts, err := redis.ParseClusterURL(c.RedisURL)
		if err != nil {
			return nil, "", badURL(err)
		}
		if err := c.redisPassword(&opts.Password); err != nil {
			return nil, "", err
		}
		// go-redis reloads its slot map on MOVED and ASK, but a pipeline
		// that meets a dead master only fails, until the periodic reload
		// (60 s by default): measured here, every pipelined command for a
		// failed-over shard kept failing for its whole minute. Reloading
		// every second (one CLUSTER SLOTS) follows a failover within about
		// a second of the promotion.
		opts.ClusterStateReloadInterval = clusterStateReload
		if opts.TLSConfig, err = c.redisTLS(opts.TLSConfig); err != nil {
			return nil, "", err
		}
		opts.ContextTimeoutEnabled = true
		return redis.NewClusterClient(opts), fmt.Sprintf("cluster mode, seeds %s", strings.Join(opts.Addrs, ", ")), nil
	default:
		return nil, "", fmt.Errorf("--redis-mode %q (env %s): want %s, %s or %s", c.RedisMode, EnvRedisMode, RedisStandalone, RedisSentinel, RedisCluster)
	}
}

// redisPassword sets *pw, the password of the URL's user, from
// --redis-password-file when it is given; a URL with a password of its own
// as well is an error (which of the two would be meant?).
func (c *Common) redisPassword(pw *string) error {
	if c.RedisPasswordFile == "" {
		return nil
	}
	if *pw != "" {
		return errors.New("--redis-url carries a password and --redis-password-file gives one too: give one")
	}
	b, err := os.ReadFile(c.RedisPasswordFile)
	if err != nil {
		return fmt.Errorf("--redis-password-file: %w", err)
	}
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return fmt.Errorf("--redis-password-file %s is empty", c.RedisPasswordFile)
	}
	*pw = p
	return nil
}

// redisTLS adds --redis-tls-ca, --redis-tls-cert and --redis-tls-key to
// the TLS configuration a rediss:// URL gave (nil for redis://).
func (c *Common) redisTLS(cfg *tls.Config) (*tls.Config, error) {
	if c.RedisCA == "" && c.RedisCert == "" && c.RedisKey == "" {
		return cfg, nil
	}
	if cfg == nil {
		return nil, errors.New("--redis-tls-ca, --redis-tls-cert and --redis-tls-key need a rediss:// --redis-url")
	}
	if c.RedisCA != "" {
		pem, err := os.ReadFile(c.RedisCA)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--redis-tls-ca %s: no PEM certificate", c.RedisCA)
		}
		cfg.RootCAs = pool
	}
	if (c.RedisCert == "") != (c.RedisKey == "") {
		return nil, errors.New("--redis-tls-cert and --redis-tls-key go together")
	}
	if c.RedisCert != "" {
		cert, err := tls.LoadX509KeyPair(c.RedisCert, c.RedisKey)
		if err != nil {
			return nil, fmt.Errorf("--redis-tls-cert, --redis-tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// mustQuery is the query of a URL that has parsed before.
func mustQuery(u string) url.Values {
	p, err := url.Parse(u)
	if err != nil {
		return nil
	}
	return p.Query()
}

// passwordParam is a password in a URL's query (sentinel mode's primary
// password).
var passwordParam = regexp.MustCompile(`(?i)([?&](sentinel_)?password=)[^&]*`)

// redactRedisURL hides the user information and a password parameter.
func redactRedisURL(u string) string {
	return passwordParam.ReplaceAllString(redactURL(u), "${1}***")
}

// redactURL hides a password in a URL.
func redactURL(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}

// Signals returns a channel that receives SIGINT and SIGTERM.
func Signals() <-chan os.Signal {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch
}

// Registry returns a Prometheus registry with the Go runtime and process
// collectors and teamster_build_info, for a daemon's own metrics.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	return reg
}

// AddReplicas registers --stream-replicas (env TEAMSTER_STREAM_REPLICAS).
func AddReplicas(fs *pflag.FlagSet, n *int) {
	def := 1
	if v := os.Getenv(EnvReplicas); v != "" {
		if _, err := fmt.Sscan(v, &def); err != nil || def < 1 {
			def = 1
		}
	}
	fs.IntVar(n, "stream-replicas", def, "replicas of the JetStream streams and the registry bucket this process creates (a router also updates existing ones to it); 3 in a three-node cluster (env "+EnvReplicas+")")
}

// AddRetention registers --attempt-retention (env
// TEAMSTER_ATTEMPT_RETENTION); the function it returns reads and checks the
// value (0 when unset: the default).
func AddRetention(fs *pflag.FlagSet) func() (time.Duration, error) {
	var v string
	fs.StringVar(&v, "attempt-retention", Env(EnvRetention, ""),
		"how long finished attempt records stay in Redis, e.g. 2h: a resubmitted attempt id is answered from its record within it, and it bounds their memory (about 1.5 KB of Redis per attempt with hash-max-listpack-value 1024, see deploy/compose); "+
			leases.MinRetention.String()+" to "+leases.FinishedTTL.String()+", default "+leases.FinishedTTL.String()+" (the results stream's max age); give routers and workers the same value (env "+EnvRetention+")")
	return func() (time.Duration, error) {
		if v == "" {
			return 0, nil
		}
		d, err := time.ParseDuration(v)
		if err == nil {
			err = leases.CheckRetention(d)
		}
		if err != nil {
			return 0, fmt.Errorf("--attempt-retention %q (env %s): %w", v, EnvRetention, err)
		}
		return d, nil
	}
}

// EnvAttemptLogLevel is the environment variable of --attempt-log-level.
const EnvAttemptLogLevel = "TEAMSTER_ATTEMPT_LOG_LEVEL"

// AddAttemptLogLevel registers --attempt-log-level (env
// TEAMSTER_ATTEMPT_LOG_LEVEL): the level of the line a router logs for each
// accepted attempt and a worker for each claim, finish and delivery. The
// returned function says whether it is debug (quiet), or why the value is
// wrong.
func AddAttemptLogLevel(fs *pflag.FlagSet) func() (quiet bool, err error) {
	var v string
	fs.StringVar(&v, "attempt-log-level", Env(EnvAttemptLogLevel, "info"),
		"level of the per-attempt lines (accepted; claimed, finished, delivered): info, or debug for fleets whose rates make a line per step too much (env "+EnvAttemptLogLevel+")")
	return func() (bool, error) {
		switch strings.ToLower(v) {
		case "info", "":
			return false, nil
		case "debug":
			return true, nil
		}
		return false, fmt.Errorf("--attempt-log-level %q (env %s): want info or debug", v, EnvAttemptLogLevel)
	}
}

// AddMetricsAddr registers --metrics-addr (env TEAMSTER_METRICS_ADDR).
func AddMetricsAddr(fs *pflag.FlagSet, addr *string) {
	fs.StringVar(addr, "metrics-addr", Env(EnvMetricsAddr, ""),
		"serve /metrics, /healthz and /readyz on this address, e.g. :9090; empty serves none (env "+EnvMetricsAddr+")")
}
