package redisproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions shape a SentinelSet. The zero value is one primary, one
// replica and three Sentinels without authentication or TLS.
type SentinelOptions struct {
	// MasterName is the name the Sentinels monitor the primary under;
	// default "teamster".
	MasterName string
	// Replicas is the number of replicas; default 1.
	Replicas int
	// DownAfter is the Sentinels' down-after-milliseconds; default 1s.
	DownAfter time.Duration
	// FailoverTimeout is the Sentinels' failover-timeout; default 2s.
	FailoverTimeout time.Duration
	// MinReplicasToWrite and MinReplicasMaxLag (seconds) set
	// min-replicas-to-write and min-replicas-max-lag on every data node;
	// 0 leaves Redis's defaults (no minimum).
	MinReplicasToWrite, MinReplicasMaxLag int
	// Username and Password, when Password is set, are the only ACL user
	// of the data nodes (the default user is off): clients, replicas and
	// Sentinels authenticate as it.
	Username, Password string
	// SentinelUsername and SentinelPassword, when SentinelPassword is set,
	// are the only ACL user of the Sentinels: clients and the Sentinels
	// among themselves authenticate as it.
	SentinelUsername, SentinelPassword string
	// TLS, when set, makes every process speak TLS only, with these files.
	// The proxy cannot read TLS, so FreezeReplication then fails.
	TLS *TLS
}

// SentinelSet is a primary, its replicas and three Sentinels monitoring it,
// all redis-server processes on loopback with their files in one directory.
//
// Everyone reaches the first primary through a Proxy: the Sentinels monitor
// the proxy's address, the replicas replicate from it, and clients get it
// from the Sentinels. So a test can freeze replication, write (the primary
// acknowledges), kill the primary and watch the write be lost in the
// failover. After a failover the new primary is a former replica, which
// everyone reaches directly: freezing works on the first primary only. The
// first primary, restarted, is reached through the proxy again (it announces
// the proxy's port when it becomes a replica).
type SentinelSet struct {
	dir       string
	opts      SentinelOptions
	proxy     *Proxy
	data      []*Redis // data[0] is the first primary, behind proxy
	sentinels []*Redis

	mu     sync.Mutex
	killed []*Redis // killed by KillPrimary and not restarted yet
}

// StartSentinelSet starts the primary behind its proxy, the replicas and
// the Sentinels, and returns once every replica is in sync and every
// Sentinel knows the replicas and the other Sentinels and has a quorum.
func StartSentinelSet(dir string, opts SentinelOptions) (*SentinelSet, error) {
	if opts.MasterName == "" {
		opts.MasterName = "teamster"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 2 * time.Second
	}
	s := &SentinelSet{dir: dir, opts: opts}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *SentinelSet) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	port, err := FreePort()
	if err != nil {
		return err
	}
	if s.proxy, err = NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err != nil {
		return err
	}
	primary, err := StartWith(s.dir, s.dataOptions(port,
		// Demoted after a failover, it is known by the proxy's address.
		"--replica-announce-port", strconv.Itoa(s.proxy.Port())))
	if err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	s.data = append(s.data, primary)
	for i := 0; i < s.opts.Replicas; i++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		r, err := StartWith(s.dir, s.dataOptions(port, "--replicaof", "127.0.0.1", strconv.Itoa(s.proxy.Port())))
		if err != nil {
			return fmt.Errorf("replica: %w", err)
		}
		s.data = append(s.data, r)
	}
	for _, r := range s.data[1:] {
		if err := waitInSync(ctx, r); err != nil {
			return err
		}
	}
	if s.opts.TLS == nil {
		err := pollUntil(ctx, "replicas linked through the proxy", func(context.Context) error {
			if n := s.proxy.ReplicationLinks(); n != s.opts.Replicas {
				return fmt.Errorf("%d replication links", n)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := s.startSentinels(); err != nil {
		return err
	}
	for _, sn := range s.sentinels {
		if err := s.waitSentinelReady(ctx, sn); err != nil {
			return err
		}
	}
	return nil
}

// dataOptions are the options of a data node on port.
func (s *SentinelSet) dataOptions(port int, extra ...string) Options {
	args := []string{
		"--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
		"--repl-diskless-sync-delay", "0", // a full sync starts at once
	}
	if s.opts.MinReplicasToWrite > 0 {
		args = append(args, "--min-replicas-to-write", strconv.Itoa(s.opts.MinReplicasToWrite))
	}
	if s.opts.MinReplicasMaxLag > 0 {
		args = append(args, "--min-replicas-max-lag", strconv.Itoa(s.opts.MinReplicasMaxLag))
	}
	if s.opts.Password != "" {
		args = append(args, aclArgs(s.opts.Username, s.opts.Password)...)
		args = append(args, "--masterauth", s.opts.Password)
		if s.opts.Username != "" {
			args = append(args, "--masteruser", s.opts.Username)
		}
	}
	return Options{Port: port, Args: append(args, extra...), Username: s.opts.Username, Password: s.opts.Password, TLS: s.opts.TLS}
}

// aclArgs turn the default user off and make user, with password, the one
// user allowed everything ("default" when user is empty).
func aclArgs(user, password string) []string {
	if user == "" || user == "default" {
		return []string{"--user", "default", "reset", "on", ">" + password, "~*", "&*", "+@all"}
	}
	return []string{"--user", "default", "off", "--user", user, "on", ">" + password, "~*", "&*", "+@all"}
}

// startSentinels writes each Sentinel's configuration, naming the others
// and the replicas so that none has to wait for their hello messages, and
// starts them.
func (s *SentinelSet) startSentinels() error {
	const n = 3
	var ports [n]int
	var ids [n]string
	for i := range ports {
		var err error
		if ports[i], err = FreePort(); err != nil {
			return err
		}
		b := make([]byte, 20)
		_, _ = rand.Read(b)
		ids[i] = hex.EncodeToString(b)
	}
	name := s.opts.MasterName
	for i := range ports {
		lines := []string{
			"sentinel myid " + ids[i],
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", name, s.proxy.Port()),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, s.opts.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", name, s.opts.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		}
		if s.opts.Password != "" {
			lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", name, strconv.Quote(s.opts.Password)))
			if s.opts.Username != "" {
				lines = append(lines, fmt.Sprintf("sentinel auth-user %s %s", name, strconv.Quote(s.opts.Username)))
			}
		}
		if s.opts.SentinelPassword != "" {
			lines = append(lines, "sentinel sentinel-pass "+strconv.Quote(s.opts.SentinelPassword))
			if s.opts.SentinelUsername != "" {
				lines = append(lines, "sentinel sentinel-user "+strconv.Quote(s.opts.SentinelUsername))
			}
		}
		for j := range ports {
			if j != i {
				lines = append(lines, fmt.Sprintf("sentinel known-sentinel %s 127.0.0.1 %d %s", name, ports[j], ids[j]))
			}
		}
		for _, r := range s.data[1:] {
			lines = append(lines, fmt.Sprintf("sentinel known-replica %s 127.0.0.1 %d", name, r.Port()))
		}
		conf := filepath.Join(s.dir, fmt.Sprintf("sentinel-%d.conf", ports[i]))
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return err
		}
		var args []string
		if s.opts.SentinelPassword != "" {
			args = aclArgs(s.opts.SentinelUsername, s.opts.SentinelPassword)
		}
		sn, err := StartWith(s.dir, Options{Port: ports[i], ConfigFile: conf, Sentinel: true, Args: args,
			Username: s.opts.SentinelUsername, Password: s.opts.SentinelPassword, TLS: s.opts.TLS})
		if err != nil {
			return fmt.Errorf("sentinel: %w", err)
		}
		s.sentinels = append(s.sentinels, sn)
	}
	return nil
}

// waitInSync waits until the replica r's link to its primary is up and no
// sync is in progress.
func waitInSync(ctx context.Context, r *Redis) error {
	c := r.Client()
	defer c.Close()
	return pollUntil(ctx, "replica "+r.Addr()+" in sync", func(ctx context.Context) error {
		st, err := infoField(ctx, c, "replication", "master_link_status")
		if err != nil {
			return err
		}
		syncing, err := infoField(ctx, c, "replication", "master_sync_in_progress")
		if err != nil {
			return err
		}
		if st != "up" || syncing != "0" {
			return fmt.Errorf("master_link_status %s, master_sync_in_progress %s", st, syncing)
		}
		return nil
	})
}

// waitSentinelReady waits until the Sentinel sees the primary up, knows
// every replica and the two other Sentinels, and has a quorum.
func (s *SentinelSet) waitSentinelReady(ctx context.Context, sn *Redis) error {
	c := redis.NewSentinelClient(sn.options())
	defer c.Close()
	name := s.opts.MasterName
	return pollUntil(ctx, "sentinel "+sn.Addr()+" ready", func(ctx context.Context) error {
		m, err := c.Master(ctx, name).Result()
		if err != nil {
			return err
		}
		if m["flags"] != "master" {
			return fmt.Errorf("master flags %q", m["flags"])
		}
		replicas, err := c.Replicas(ctx, name).Result()
		if err != nil {
			return err
		}
		up := 0
		for _, r := range replicas {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" {
				up++
			}
		}
		if up != s.opts.Replicas {
			return fmt.Errorf("%d of %d replicas up", up, s.opts.Replicas)
		}
		peers, err := c.Sentinels(ctx, name).Result()
		if err != nil {
			return err
		}
		if len(peers) != len(s.sentinels)-1 {
			return fmt.Errorf("knows %d other sentinels", len(peers))
		}
		return c.CkQuorum(ctx, name).Err()
	})
}

// MasterName is the name the Sentinels monitor the primary under.
func (s *SentinelSet) MasterName() string { return s.opts.MasterName }

// SentinelAddrs are the Sentinels' host:port addresses.
func (s *SentinelSet) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// URL is the sentinel-mode URL of the set, as redis.ParseFailoverURL reads
// it: redis://[user:pass@]sentinel1/0?master_name=NAME&addr=sentinel2&addr=sentinel3
// (rediss:// with TLS). The user information is the Sentinels' user;
// the data nodes' user, when they have one, is in the username and password
// parameters, unless it is the same as the Sentinels'.
func (s *SentinelSet) URL() string {
	addrs := s.SentinelAddrs()
	u := url.URL{Scheme: "redis", Host: addrs[0], Path: "/0"}
	if s.opts.TLS != nil {
		u.Scheme = "rediss"
	}
	if s.opts.SentinelPassword != "" {
		u.User = url.UserPassword(s.opts.SentinelUsername, s.opts.SentinelPassword)
	}
	q := []string{"master_name=" + url.QueryEscape(s.opts.MasterName)}
	for _, a := range addrs[1:] {
		q = append(q, "addr="+a) // host:port as is, for the reader
	}
	if s.opts.Password != "" && (s.opts.Username != s.opts.SentinelUsername || s.opts.Password != s.opts.SentinelPassword) {
		q = append(q, "username="+url.QueryEscape(s.opts.Username), "password="+url.QueryEscape(s.opts.Password))
	}
	u.RawQuery = strings.Join(q, "&")
	return u.String()
}

// Client is a new go-redis failover client of the set, from URL (and the
// TLS configuration of the set's CA); the caller closes it.
func (s *SentinelSet) Client() *redis.Client {
	opts, err := redis.ParseFailoverURL(s.URL())
	if err != nil {
		panic(fmt.Sprintf("redisproc: the set's own URL: %v", err)) // a bug here
	}
	opts.TLSConfig = s.data[0].tls
	return redis.NewFailoverClient(opts)
}

// Proxy is the replication-freezing proxy in front of the first primary.
func (s *SentinelSet) Proxy() *Proxy { return s.proxy }

// MasterAddr is the primary's address as the first Sentinel that answers
// reports it (SENTINEL get-master-addr-by-name).
func (s *SentinelSet) MasterAddr(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		addr, err := s.masterAddrFrom(ctx, sn)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no sentinel answers the master address: %w", errors.Join(errs...))
}

func (s *SentinelSet) masterAddrFrom(ctx context.Context, sn *Redis) (string, error) {
	c := redis.NewSentinelClient(sn.options())
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, s.opts.MasterName).Result()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", sn.Addr(), err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: master address %q", sn.Addr(), hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// node is the data node at addr, the proxy's address standing for the
// first primary.
func (s *SentinelSet) node(addr string) (*Redis, error) {
	if addr == s.proxy.Addr() {
		return s.data[0], nil
	}
	for _, r := range s.data {
		if r.Addr() == addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no data node at %s", addr)
}

// FreezeReplication freezes the replication from the first primary (see
// Proxy). It fails when the set runs TLS, which the proxy cannot read, and
// when the Sentinels report another primary: after a failover the primary
// is not behind the proxy.
func (s *SentinelSet) FreezeReplication() error {
	if s.opts.TLS != nil {
		return errors.New("cannot freeze replication under TLS: the proxy cannot see PSYNC")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return err
	}
	if addr != s.proxy.Addr() {
		return fmt.Errorf("the primary is %s, not the first primary behind the proxy %s", addr, s.proxy.Addr())
	}
	s.proxy.FreezeReplication()
	return nil
}

// ThawReplication lets replication from the first primary flow again.
func (s *SentinelSet) ThawReplication() { s.proxy.ThawReplication() }

// KillPrimary kills the primary the Sentinels report with SIGKILL and
// returns the address they reported, for WaitFailover.
func (s *SentinelSet) KillPrimary() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	r, err := s.node(addr)
	if err != nil {
		return "", err
	}
	if err := r.Kill(); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.killed = append(s.killed, r)
	s.mu.Unlock()
	return addr, nil
}

// WaitFailover waits until every running Sentinel reports the same primary,
// not oldAddr, and that node answers ROLE as a master; it returns the new
// primary's address.
func (s *SentinelSet) WaitFailover(ctx context.Context, oldAddr string) (string, error) {
	var addr string
	err := pollUntil(ctx, "failover from "+oldAddr, func(ctx context.Context) error {
		addr = ""
		for _, sn := range s.sentinels {
			if !sn.Running() {
				continue
			}
			a, err := s.masterAddrFrom(ctx, sn)
			if err != nil {
				return err
			}
			if a == oldAddr {
				return fmt.Errorf("sentinel %s still reports %s", sn.Addr(), oldAddr)
			}
			if addr != "" && a != addr {
				return fmt.Errorf("sentinels disagree: %s and %s", addr, a)
			}
			addr = a
		}
		r, err := s.node(addr)
		if err != nil {
			return err
		}
		c := r.Client()
		defer c.Close()
		got, err := role(ctx, c)
		if err != nil {
			return err
		}
		if got != "master" {
			return fmt.Errorf("%s answers ROLE %s", addr, got)
		}
		return nil
	})
	return addr, err
}

// RestartKilled starts the processes KillPrimary killed again on their
// ports, empty, and returns once they answer. The Sentinels then make each
// a replica of the current primary, which Sentinel does only after it has
// seen it report itself a master for a while (about 10 seconds with Redis
// 7.0).
func (s *SentinelSet) RestartKilled() error {
	s.mu.Lock()
	killed := s.killed
	s.killed = nil
	s.mu.Unlock()
	var errs []error
	for _, r := range killed {
		errs = append(errs, r.Start())
	}
	return errors.Join(errs...)
}

// Close kills every process and the proxy. It removes nothing: the
// configuration files and logs stay in dir.
func (s *SentinelSet) Close() {
	for _, r := range s.sentinels {
		_ = r.Kill()
	}
	for _, r := range s.data {
		_ = r.Kill()
	}
	if s.proxy != nil {
		s.proxy.Close()
	}
}
