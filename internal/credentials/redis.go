package credentials

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// RedisRole is a Redis ACL user: one per role, shared by every principal of
// the role (all routers log in as "router", all workers as "worker"). Redis
// cannot tell two routers apart by what they may do, since they run the same
// commands on the same keys, so a user per router would add passwords without
// narrowing anything.
type RedisRole string

// The roles. Router, worker and operator are the daemons' and the CLI's;
// replication is what a replica logs in to its primary with (masteruser),
// sentinel what a Sentinel logs in to the data nodes and to the other
// Sentinels with, healthcheck what compose's healthchecks log in with.
// admin is a person's, for maintenance (SENTINEL SET, ACL LOAD after a
// password change, CONFIG SET, ACL LOG): it may do anything, and its
// password is only in passwords.json, on the host that generated it.
const (
	RedisAdmin       RedisRole = "admin"
	RedisRouter      RedisRole = "router"
	RedisWorker      RedisRole = "worker"
	RedisOperator    RedisRole = "operator"
	RedisReplication RedisRole = "replication"
	RedisSentinel    RedisRole = "sentinel"
	RedisHealthcheck RedisRole = "healthcheck"
)

// RedisRoles are every role but admin, in the order the files list them.
func RedisRoles() []RedisRole {
	return []RedisRole{RedisRouter, RedisWorker, RedisOperator, RedisReplication, RedisSentinel, RedisHealthcheck}
}

// RedisPrincipal is a role's ACL user and its password.
type RedisPrincipal struct{ User, Password string }

// connect are the commands go-redis sends on every new connection: HELLO
// (RESP3, with AUTH), AUTH (RESP2 fallback) and PING (health checks,
// cmdutil's start-up check). It also sends CLIENT SETINFO (its name and
// version), and ignores the error: the subcommand is Redis 7.2's, and an ACL
// naming it does not load on 7.0, so it is left out (on 7.2 and later each
// new connection then leaves a NOPERM in ACL LOG, unless the client sets
// DisableIdentity).
const connect = "+hello +auth +ping"

// Key patterns. Every key teamster writes is under teamster: (leases/keys.go):
// a session's keys teamster:{<tag>}:..., the reaper index shards
// teamster:{reaper-<k>}:due and the slots' node markers teamster:{n...}:node
// (all three match teamster:{*), the attempt-id claims
// teamster:attemptid:{<id>} and the source authorities teamster:source:{<id>}.
const (
	sessionKeys   = "~teamster:{*"
	attemptIDKeys = "~teamster:attemptid:{*"
	sourceKeys    = "~teamster:source:{*"
)

// dataRules are each role's permissions on the data nodes, after
// "reset on #<hash>". A role's commands are the union of what its Go code
// sends and what the Lua scripts it runs call (Redis checks a script's
// redis.call against the caller's ACL, commands and keys alike).
var dataRules = map[RedisRole]string{
	// Router: leases.Store.Load (SCRIPT LOAD), then EVALSHA and, after a
	// restart of Redis forgot the scripts, EVAL. Go-side: Accept's id claim
	// (SET NX PX, GET of the owner) and index entry (ZADD NX), the index
	// moves of MarkPublishedTag (ZADD XX), ConfirmSentTag and the reaper
	// (ZREM, ZADD XX), Attempt/Session/LeaseOf (HGETALL, PTTL), NodeIDs
	// (INFO replication). Inside its scripts (accept, unaccept, markNode,
	// markPublished, sent, due, reap, adopt, grant, revoke, sessionOp):
	// TIME, INFO (node_id), EXISTS, HGET, HMGET, HSET, HDEL, HEXISTS,
	// PEXPIRE, PTTL, DEL, RPUSH, LREM, ZADD, ZRANGEBYSCORE.
	RedisRouter: connect + " +evalsha +eval +script|load" +
		" +set +get +zadd +zrem +zrangebyscore +hgetall +hget +hmget +hset +hdel +hexists" +
		" +exists +del +pexpire +pttl +rpush +lrem +time +info " +
		sessionKeys + " " + attemptIDKeys + " " + sourceKeys,
	// Worker: Load, EVALSHA, EVAL as the router. Go-side: the keeper's
	// index moves (ZADD XX), ConfirmSent (ZREM), SourceCurrent (HMGET of a
	// source, which it only reads). Inside its scripts (claim, renew,
	// release, finish, abandon, unclaim, markPublished, sent, adopt): TIME,
	// INFO, EXISTS, HGET, HGETALL, HMGET, HSET, HDEL, HEXISTS, HINCRBY,
	// PEXPIRE, DEL, LINDEX, LPOP, LREM. It never accepts (no attempt-id
	// keys, no RPUSH, no SET) and never changes a source.
	RedisWorker: connect + " +evalsha +eval +script|load" +
		" +zadd +zrem +hgetall +hget +hmget +hset +hdel +hexists +hincrby" +
		" +exists +del +pexpire +lindex +lpop +lrem +time +info " +
		sessionKeys + " %R" + sourceKeys,
	// Operator (teamster status, attempts, show, sessions, session,
	// prune-state): reads only. InFlight/InFlightCount (ZREVRANGE, ZCARD
	// of the index), AttemptByID/TagsOf (GET of attempt-id keys),
	// AttemptViews/SessionByTag (HGETALL, PTTL, LRANGE, LLEN),
	// NativeStates (HGET). No script: a script could write.
	RedisOperator: connect + " +get +hget +hgetall +pttl +zrevrange +zcard +lrange +llen %R~teamster:*",
	// Replication: a replica's link to its primary (masteruser): PING,
	// REPLCONF, PSYNC (SYNC for old replicas). No key is named.
	RedisReplication: connect + " +psync +sync +replconf",
	// Sentinel on a data node: the commands Redis's documentation lists for
	// a Sentinel user (it monitors with INFO, PING and ROLE, talks to the
	// other Sentinels over __sentinel__:hello, and fails over with MULTI,
	// REPLICAOF/SLAVEOF, CONFIG REWRITE, CLIENT KILL, EXEC), and that
	// channel only.
	RedisSentinel: connect + " +info +role +multi +exec +slaveof +replicaof +config|rewrite" +
		" +client|setname +client|kill +script|kill +subscribe +publish &__sentinel__:hello",
	// Healthcheck: redis-cli info replication.
	RedisHealthcheck: connect + " +info",
	RedisAdmin:       "+@all ~* &*",
}

// sentinelRules are each role's permissions on the Sentinels (their own ACL,
// in the Sentinels' configuration). The router, the worker and the operator
// log in there with the same user and password as on the data nodes, so a
// daemon's TEAMSTER_REDIS_URL names one user (cmdutil uses the Sentinels'
// credentials for the data nodes when the URL has no password= parameter),
// and revoking a role revokes it on both. A go-redis failover client asks
// for the primary (SENTINEL GET-MASTER-ADDR-BY-NAME), learns the other
// Sentinels (SENTINEL SENTINELS) and listens for failovers (SUBSCRIBE
// +switch-master +replica-reconf-done).
var sentinelRules = map[RedisRole]string{
	RedisRouter:   sentinelClient,
	RedisWorker:   sentinelClient,
	RedisOperator: sentinelClient,
	// A Sentinel's links to the other Sentinels (sentinel-user): PING,
	// hello messages (PUBLISH __sentinel__:hello), votes and down checks
	// (SENTINEL IS-MASTER-DOWN-BY-ADDR), its connection name and INFO.
	RedisSentinel: connect + " +client|setname +info +role +publish +subscribe" +
		" +sentinel|is-master-down-by-addr &__sentinel__:hello",
	// Healthcheck: redis-cli -p 26379 sentinel ckquorum <master>.
	RedisHealthcheck: connect + " +sentinel|ckquorum",
	RedisAdmin:       "+@all ~* &*",
}

const sentinelClient = connect + " +sentinel|get-master-addr-by-name +sentinel|sentinels +subscribe" +
	" &+switch-master &+replica-reconf-done"

// RedisACL is what EnsureRedisACL wrote: the files the servers read and the
// roles' passwords.
type RedisACL struct {
	// ACLFile is users.acl, the data nodes' --aclfile: every role's user
	// with its password hashed, and the default user off.
	ACLFile string
	// NodeConf is node.conf, included by every data node (--include): the
	// replication user's password (masterauth), which Redis reads only in
	// clear, so it cannot be on the committed command line.
	NodeConf string
	// SentinelConf is sentinel.conf, included by every Sentinel: the
	// Sentinels' own users (hashed), and the passwords a Sentinel logs in
	// with, in clear, to the data nodes (auth-pass) and to the other
	// Sentinels (sentinel-pass).
	SentinelConf string
	// HealthcheckEnv is healthcheck.env (mode 0600), compose's env_file for
	// the data nodes and the Sentinels: REDISCLI_AUTH, the healthcheck
	// user's password, which redis-cli reads from the environment.
	HealthcheckEnv string
	// PasswordFile is passwords.json (mode 0600), the roles' passwords: a
	// second run reads them, so they never change.
	PasswordFile string

	dir string

	principals map[RedisRole]RedisPrincipal
}

// DaemonPasswordFile is <dir>/<role>.password, the password of a daemon's
// role (router, worker or operator) alone, which the daemon reads with
// --redis-password-file (TEAMSTER_REDIS_PASSWORD_FILE) while its
// TEAMSTER_REDIS_URL names only the user: the file is mounted into the
// daemon's container, the URL can be committed.
func (a *RedisACL) DaemonPasswordFile(role RedisRole) string {
	return filepath.Join(a.dir, string(role)+".password")
}

// daemonRoles are the roles whose password a daemon reads from its own file.
var daemonRoles = []RedisRole{RedisRouter, RedisWorker, RedisOperator}

// Principal is role's user and password; ok is false for a role the file
// does not have.
func (a *RedisACL) Principal(role RedisRole) (p RedisPrincipal, ok bool) {
	p, ok = a.principals[role]
	return p, ok
}

// EnsureRedisACL writes dir/users.acl, dir/node.conf, dir/sentinel.conf,
// dir/healthcheck.env and dir/<role>.password for each daemon role, for the
// roles (every role when nil; the replication, sentinel and healthcheck
// users are always there, the topology needs them, and so is admin), master
// being the name
// the Sentinels monitor the primary under. A role's password is created
// once, 32 random bytes in hex, and kept in dir/passwords.json; a second run
// keeps every password and rewrites the other files from them. The files
// the containers read are mode 0644 (writeMounted: the Redis containers run
// as the image's redis user, teamster's as nonroot, neither the owner of the
// files; dir itself is 0700); passwords.json and healthcheck.env, which
// only the host reads (compose reads the env file), are 0600.
func EnsureRedisACL(dir, master string, roles []RedisRole) (*RedisACL, error) {
	if master == "" || strings.ContainsAny(master, " \t\r\n\"'") {
		return nil, fmt.Errorf("master name %q: want a word", master)
	}
	if roles == nil {
		roles = RedisRoles()
	}
	for _, r := range []RedisRole{RedisReplication, RedisSentinel, RedisHealthcheck, RedisAdmin} {
		if !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	for _, r := range roles {
		if _, ok := dataRules[r]; !ok {
			return nil, fmt.Errorf("redis role %q: want one of %v", r, RedisRoles())
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	a := &RedisACL{
		ACLFile:        filepath.Join(dir, "users.acl"),
		NodeConf:       filepath.Join(dir, "node.conf"),
		SentinelConf:   filepath.Join(dir, "sentinel.conf"),
		PasswordFile:   filepath.Join(dir, "passwords.json"),
		HealthcheckEnv: filepath.Join(dir, "healthcheck.env"),
		dir:            dir,
		principals:     map[RedisRole]RedisPrincipal{},
	}
	passwords := map[string]string{}
	switch b, err := os.ReadFile(a.PasswordFile); {
	case err == nil:
		if err := json.Unmarshal(b, &passwords); err != nil {
			return nil, fmt.Errorf("%s: %w", a.PasswordFile, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	changed := false
	for _, r := range roles {
		pw := passwords[string(r)]
		if pw == "" {
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return nil, err
			}
			pw, changed = hex.EncodeToString(b[:]), true
			passwords[string(r)] = pw
		}
		a.principals[r] = RedisPrincipal{User: string(r), Password: pw}
	}
	if changed {
		b, err := json.MarshalIndent(passwords, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := writeSecret(a.PasswordFile, append(b, '\n')); err != nil {
			return nil, err
		}
	}
	if err := writeMounted(a.ACLFile, []byte(a.aclFile(roles))); err != nil {
		return nil, err
	}
	node := "# Generated by teamster credentials: included by every data node.\n" +
		"# A replica logs in to its primary as the replication user.\n" +
		"masteruser " + string(RedisReplication) + "\n" +
		"masterauth " + a.principals[RedisReplication].Password + "\n"
	if err := writeMounted(a.NodeConf, []byte(node)); err != nil {
		return nil, err
	}
	if err := writeMounted(a.SentinelConf, []byte(a.sentinelFile(master, roles))); err != nil {
		return nil, err
	}
	if err := writeSecret(a.HealthcheckEnv, []byte("REDISCLI_AUTH="+a.principals[RedisHealthcheck].Password+"\n")); err != nil {
		return nil, err
	}
	for _, r := range daemonRoles {
		if p, ok := a.principals[r]; ok {
			if err := writeMounted(a.DaemonPasswordFile(r), []byte(p.Password+"\n")); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// aclFile is the data nodes' ACL file: the default user off (a connection
// that does not log in can do nothing), then each role's user.
func (a *RedisACL) aclFile(roles []RedisRole) string {
	var b strings.Builder
	b.WriteString("user default off resetkeys resetchannels -@all\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "user %s reset on #%s %s\n", r, hashPassword(a.principals[r].Password), dataRules[r])
	}
	return b.String()
}

// sentinelFile is what every Sentinel includes: its users, and the
// credentials it logs in with to the data nodes and to its peers.
func (a *RedisACL) sentinelFile(master string, roles []RedisRole) string {
	var b strings.Builder
	b.WriteString("# Generated by teamster credentials: included by every Sentinel.\n")
	b.WriteString("user default off resetkeys resetchannels -@all\n")
	for _, r := range roles {
		if rule, ok := sentinelRules[r]; ok {
			fmt.Fprintf(&b, "user %s reset on #%s %s\n", r, hashPassword(a.principals[r].Password), rule)
		}
	}
	s := a.principals[RedisSentinel]
	fmt.Fprintf(&b, "sentinel sentinel-user %s\nsentinel sentinel-pass %s\n", s.User, s.Password)
	fmt.Fprintf(&b, "sentinel auth-user %s %s\nsentinel auth-pass %s %s\n", master, s.User, master, s.Password)
	return b.String()
}

func hashPassword(pw string) string {
	sum := sha256.Sum256([]byte(pw))
	return hex.EncodeToString(sum[:])
}

// RedisURL is a standalone daemon's TEAMSTER_REDIS_URL (TEAMSTER_REDIS_MODE
// standalone, TEAMSTER_REDIS_TLS_CA the CA): rediss://<user>:<password>@<addr>/0,
// or rediss://<user>@<addr>/0 when p has no password (the daemon reads it
// from TEAMSTER_REDIS_PASSWORD_FILE).
func RedisURL(p RedisPrincipal, addr string) string {
	u := url.URL{Scheme: "rediss", User: p.userinfo(), Host: addr, Path: "/0"}
	return u.String()
}

func (p RedisPrincipal) userinfo() *url.Userinfo {
	if p.Password == "" {
		return url.User(p.User)
	}
	return url.UserPassword(p.User, p.Password)
}

// RedisSentinelURL is a daemon's TEAMSTER_REDIS_URL in sentinel mode
// (TEAMSTER_REDIS_MODE sentinel, TEAMSTER_REDIS_TLS_CA the CA):
//
//	rediss://<user>:<password>@<sentinels[0]>/0?addr=<sentinels[1]>&...&dial_timeout=5s&disableIdentity=true&master_name=<master>
//
// (<user>@ alone when p has no password: the daemon reads it from
// TEAMSTER_REDIS_PASSWORD_FILE, as deploy/compose's do). The user information logs in to the Sentinels and, with no password=
// parameter, to the data nodes too (internal/cmdutil): the role has the same
// user and password on both. A daemon should start its list with a different
// Sentinel than its neighbours. dial_timeout: go-redis's failover client
// dials the data nodes with the URL's dial timeout as is, none when it has
// none, and a TLS handshake with a frozen primary (one that accepts the
// connection in the kernel and answers nothing) then never ends: measured in
// deploy/compose's failover test, every new connection hung past the
// promotion. disableIdentity: the data nodes' users may not run CLIENT
// SETINFO (see connect), so go-redis does not send it.
func RedisSentinelURL(p RedisPrincipal, master string, sentinels []string) string {
	// host:port needs no escaping in a query; url.Values would write
	// the colon as %3A, which reads the same but badly.
	var q []string
	for _, s := range sentinels[1:] {
		q = append(q, "addr="+s)
	}
	q = append(q, "dial_timeout=5s", "disableIdentity=true", "master_name="+url.QueryEscape(master))
	u := url.URL{Scheme: "rediss", User: p.userinfo(), Host: sentinels[0], Path: "/0", RawQuery: strings.Join(q, "&")}
	return u.String()
}
