package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster/internal/credentials"
)

func credentialsCmd() *cobra.Command {
	spec := credentials.ComposeSpec()
	var dir string
	cmd := &cobra.Command{
		Use:   "credentials --dir DIR",
		Short: "Generate a deployment's NKeys, NATS permissions, TLS certificates and Redis ACL users",
		Long: `credentials writes into DIR what a deployment needs to run with per-principal
permissions and TLS, and is missing there; nothing it writes is a file of the
repository (deploy/compose/secrets/ is git-ignored):

  DIR/nats/<role>-<name>.nk   each principal's NKey seed
  DIR/nats/auth.conf          the account TEAMSTER: one NKey user per principal
                              and its permissions, included by the NATS nodes
  DIR/tls/ca.pem, ca-key.pem  the deployment's CA (its key stays on this host)
  DIR/tls/<host>.pem, -key    a certificate per NATS and Redis host
  DIR/redis/users.acl         the Redis ACL users, one per role (router, worker,
                              operator, replication, sentinel, healthcheck),
                              passwords hashed, the default user off
  DIR/redis/node.conf         the data nodes' include: the replication login
  DIR/redis/sentinel.conf     the Sentinels' include: their users and logins
  DIR/redis/<role>.password   router's, worker's and operator's password, for
                              TEAMSTER_REDIS_PASSWORD_FILE
  DIR/redis/healthcheck.env   compose's env file for the healthchecks
  DIR/redis/passwords.json    every role's password (stays on this host)

DIR is created mode 0700, and an existing DIR that other users may enter is
refused: the files that containers read from bind mounts are mode 0644 (the
containers do not run as their owner), so DIR is what keeps them private.

Principals are named by the flags (defaults: deploy/compose's deployment).
Each gateway logs in with DIR/nats/gateway-<id>.nk, uses the inbox prefix
_INBOX.gateway.<id>, submits on teamster.submit.gateway.<id> and answers host
callbacks for host id <id> only.

Running it again keeps every key, password and certificate it finds, adds the
principals and hosts that are new, and rewrites auth.conf and the ACL file:
to add a gateway, run it with the gateway in --gateways and reload NATS
(nats-server --signal reload, or restart the nodes one at a time). To change
a Redis role's password, remove it from passwords.json and run it again; then
restart the data nodes and Sentinels (they read their files at start) and the
role's daemons.`,
		Example: `  teamster credentials --dir deploy/compose/secrets
  teamster credentials --dir deploy/compose/secrets --gateways gateway-1,gateway-2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("--dir is required")
			}
			l, err := credentials.Generate(dir, spec)
			if err != nil {
				return err
			}
			ps, _ := spec.Principals()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "credentials in %s\n", l.Dir)
			fmt.Fprintf(out, "  NATS principals: %d (%s)\n", len(ps), l.NATSAuth)
			fmt.Fprintf(out, "  CA: %s\n", l.CA)
			fmt.Fprintf(out, "  Redis ACL users: %s\n", l.Redis.ACLFile)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write into (created when missing)")
	f.StringSliceVar(&spec.Gateways, "gateways", spec.Gateways, "gateway ids (each is also the gateway's host id)")
	f.StringSliceVar(&spec.Delegates, "delegates", spec.Delegates, "delegates, each <pluginId>@<gatewayId>: a delegate plugin bound to the gateway whose sessions it continues")
	f.StringSliceVar(&spec.Routers, "routers", spec.Routers, "router ids (each router's TEAMSTER_ROUTER_ID)")
	f.StringSliceVar(&spec.Workers, "workers", spec.Workers, "workers, each <workerId>=<harnessId>+<harnessId> (its config's workerId and the ids of the harnesses it hosts, whose queues alone it may then fetch from); a bare <workerId> may fetch from every harness's")
	f.StringSliceVar(&spec.Operators, "operators", spec.Operators, "operators' names")
	f.StringSliceVar(&spec.NATSHosts, "nats-hosts", spec.NATSHosts, "NATS servers' host names, each gets a certificate")
	f.StringSliceVar(&spec.RedisHosts, "redis-hosts", spec.RedisHosts, "Redis data nodes' and Sentinels' host names, each gets a certificate")
	f.StringVar(&spec.RedisMaster, "redis-master", spec.RedisMaster, "the name the Sentinels monitor the Redis primary under (sentinel.conf's monitor)")
	return cmd
}
