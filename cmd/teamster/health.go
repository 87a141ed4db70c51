package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func healthCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health [URL]",
		Short: "Ask a router's or worker's /readyz whether it serves",
		Long: `health GETs a daemon's readiness endpoint (default
http://127.0.0.1:9090/readyz; the daemons serve it on TEAMSTER_METRICS_ADDR)
and prints its answer. It is the container images' healthcheck: they have no
shell and no curl.

Exit codes: 0 ready (HTTP 200); 1 not ready, or no answer.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			url := "http://127.0.0.1:9090/readyz"
			if len(args) == 1 {
				url = args[0]
			}
			c := &http.Client{Timeout: timeout}
			resp, err := c.Get(url)
			if err != nil {
				return &exitError{1, fmt.Errorf("health: %w", err)}
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			text := strings.TrimSpace(string(body))
			if resp.StatusCode != http.StatusOK {
				return &exitError{1, fmt.Errorf("health: %s answered %s: %s", url, resp.Status, text)}
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "give up after this long")
	return cmd
}
