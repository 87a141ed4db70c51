package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/client"
	"github.com/teamster-fleet/teamster/internal/cmdutil"
)

func submitCmd(common *cmdutil.Common) *cobra.Command {
	var (
		file    string
		follow  bool
		asJSON  bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "submit -f attempt.json [--follow]",
		Short: "Submit a prepared attempt",
		Long: `submit sends a prepared attempt (a JSON file in the envelope of docs/PROTOCOL.md; "-"
reads standard input) to teamster.submit (teamster.submit.gateway.<ID> with
--gateway ID) and prints the router's reply: the
attempt id and the harness selection. With --follow it then streams the
attempt's events (a progress line on a terminal) and prints its result.

Exit codes: 0 accepted (or, with --follow, an ok result) or fallback; 1 the
submit was rejected or failed; 2 the result is not ok (error, timeout,
cancelled).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON = asJSON || outputJSON()
			if file == "" {
				return fmt.Errorf("-f is required (a prepared attempt JSON file, or - for standard input)")
			}
			a, err := readAttempt(file)
			if err != nil {
				return err
			}
			log, err := common.Logger()
			if err != nil {
				return err
			}
			nc, err := common.ConnectNATS("teamster-cli", log)
			if err != nil {
				return err
			}
			defer nc.Close()
			c, err := client.New(nc, client.WithGateway(common.Gateway))
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			out := cmd.OutOrStdout()
			h, err := c.Submit(ctx, a)
			// A rejection has no handle; its error carries the reply.
			var reply *bus.SubmitReply
			var rejected *client.RejectedError
			switch {
			case h != nil:
				reply = h.Reply
			case errors.As(err, &rejected):
				reply = rejected.Reply
			}
			if reply != nil {
				if asJSON {
					printJSON(out, reply)
				} else {
					printReply(out, reply)
				}
			}
			if err != nil {
				return &exitError{1, err}
			}
			if h.Reply.Status != bus.StatusAccepted || !follow {
				return nil
			}
			defer h.Close()
			return followAttempt(ctx, out, h, asJSON)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "prepared attempt JSON file (- for standard input)")
	cmd.Flags().BoolVar(&follow, "follow", false, "stream the attempt's events and wait for its result")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the reply, events and result as JSON lines")
	_ = cmd.Flags().MarkHidden("json") // -o json says it for every command
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "give up waiting after this long")
	return cmd
}

func readAttempt(file string) (*bus.Attempt, error) {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(os.Stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, err
	}
	var a bus.Attempt
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, jsonFileError(file, b, err)
	}
	return &a, nil
}

// jsonFileError names where in the file JSON decoding failed: the line and
// column of a syntax error or of a value of the wrong type.
func jsonFileError(file string, b []byte, err error) error {
	if file == "-" {
		file = "standard input"
	}
	var offset int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		offset = se.Offset - 1 // the offending byte itself
	case errors.As(err, &te):
		offset = te.Offset
		err = fmt.Errorf("field %s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	if offset < 0 || offset > int64(len(b)) {
		return fmt.Errorf("%s: not a prepared attempt: %w", file, err)
	}
	line, col := 1, 1
	for _, c := range b[:offset] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("%s:%d:%d: not a prepared attempt: %w", file, line, col, err)
}

// followAttempt prints the events of h until its result.
func followAttempt(ctx context.Context, out io.Writer, h *client.Handle, asJSON bool) error {
	tty := false
	if f, ok := out.(*os.File); ok && !asJSON {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	start := time.Now()
	events := 0
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	clear := func() {
		if tty {
			fmt.Fprint(out, "\r\033[K")
		}
	}
	for {
		select {
		case e, ok := <-h.Events():
			if !ok {
				r, err := h.Result(ctx)
				if err != nil {
					return &exitError{1, err}
				}
				return resultExit(r)
			}
			events++
			clear()
			if asJSON {
				printJSON(out, e)
				continue
			}
			if e.Type == bus.EventResult {
				var r bus.Result
				if err := json.Unmarshal(e.Data, &r); err == nil {
					fmt.Fprintf(out, "  #%-3d result\n", e.Seq)
					printResult(out, &r, time.Since(start))
					return resultExit(&r)
				}
			}
			fmt.Fprintf(out, "  #%-3d %s\n", e.Seq, describeEvent(e))
		case <-ticker.C:
			if tty {
				fmt.Fprintf(out, "\r\033[K%s running %s, %d events", spinner(time.Since(start)), time.Since(start).Round(100*time.Millisecond), events)
			}
		case <-ctx.Done():
			clear()
			return &exitError{1, fmt.Errorf("gave up waiting for the result: %w", ctx.Err())}
		}
	}
}

func resultExit(r *bus.Result) error {
	if r.Status == teamster.StatusOK {
		return nil
	}
	return &exitError{2, fmt.Errorf("")}
}

func spinner(d time.Duration) string {
	frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
	return frames[int(d/(100*time.Millisecond))%len(frames)]
}
