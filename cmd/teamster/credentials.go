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

  DIR/nats/<role>-<name>.nk   each principal's NKey seed (mode 0600)
  DIR/nats/auth.conf          the account TEAMSTER: one NKey user per principal
                              and its permissions, included by the NATS nodes
  DIR/tls/ca.pem, ca-key.pem  the deployment's CA
  DIR/tls/<host>.pem, -key    a certificate per NATS and Redis host
  DIR/redis/                  the Redis ACL file and each role's password
  DIR/env/<service>.env       each router's and worker's TEAMSTER_REDIS_URL

Principals are named by the flags (defaults: deploy/compose's deployment).
Each gateway logs in with DIR/nats/gateway-<id>.nk, uses the inbox prefix
_INBOX.gateway.<id>, submits on teamster.submit.gateway.<id> and answers host
callbacks for host id <id> only.

Running it again keeps every key, password and certificate it finds, adds the
principals and hosts that are new, and rewrites auth.conf and the ACL file:
to add a gateway, run it with the gateway in --gateways and reload NATS
(nats-server --signal reload, or restart the nodes one at a time).`,
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
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "directory to write into (created when missing)")
	f.StringSliceVar(&spec.Gateways, "gateways", spec.Gateways, "gateway ids (each is also the gateway's host id)")
	f.StringSliceVar(&spec.Delegates, "delegates", spec.Delegates, "delegate plugin ids")
	f.StringSliceVar(&spec.Routers, "routers", spec.Routers, "router ids (each router's TEAMSTER_ROUTER_ID)")
	f.StringSliceVar(&spec.Workers, "workers", spec.Workers, "worker ids (each worker config's workerId)")
	f.StringSliceVar(&spec.Operators, "operators", spec.Operators, "operators' names")
	f.StringSliceVar(&spec.NATSHosts, "nats-hosts", spec.NATSHosts, "NATS servers' host names, each gets a certificate")
	f.StringSliceVar(&spec.RedisHosts, "redis-hosts", spec.RedisHosts, "Redis data nodes' and Sentinels' host names, each gets a certificate")
	return cmd
}
