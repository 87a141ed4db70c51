package codex

import "fmt"

// usageMeter turns the app-server's usage notifications into one report per
// completed model response, each with the response's own output tokens.
//
// Two sources, one per response:
//   - rawResponse/completed carries the Responses API response id and its
//     usage. The app-server sends it only for threads started with
//     experimentalRawEvents while they stay loaded, so only for the first
//     turn of a session (the harness unloads the thread after every turn,
//     and thread/resume cannot ask for raw events).
//   - thread/tokenUsage/updated follows every completed response with the
//     thread's cumulative total and the last response's breakdown, but no
//     response id. It is also re-sent with an unchanged total: when a
//     thread is resumed (under the previous turn's id) and when a steer
//     aborts an in-flight request (under this turn's). So it counts only
//     when the total moved, and its report id is derived from the new total
//     ("<threadId>/usage-<totalTokens>-<outputTokens>"), which names that
//     response and nothing else.
//
// Once a turn has seen a raw response, the token usage notifications are the
// same responses again and are not reported. A meter serves one turn, from
// the loop's goroutine only.
type usageMeter struct {
	rawSeen  bool
	baseline *tokenBreakdown // the thread's last known cumulative total
}

// fresh says the thread is new: its total starts at zero.
func (u *usageMeter) fresh() { u.baseline = &tokenBreakdown{} }

// raw reads a rawResponse/completed of this turn.
func (u *usageMeter) raw(n rawResponseNote) (responseID string, outputTokens int64, ok bool) {
	u.rawSeen = true
	if n.ResponseID == "" || n.Usage == nil {
		return "", 0, false
	}
	return n.ResponseID, n.Usage.OutputTokens, true
}

// tokens reads a thread/tokenUsage/updated of the thread; current says it
// is this turn's.
func (u *usageMeter) tokens(threadID string, n tokenUsageNote, current bool) (responseID string, outputTokens int64, ok bool) {
	total := n.TokenUsage.Total
	moved := u.baseline == nil || *u.baseline != total
	u.baseline = &total
	if !current || !moved || u.rawSeen {
		return "", 0, false
	}
	return fmt.Sprintf("%s/usage-%d-%d", threadID, total.TotalTokens, total.OutputTokens), n.TokenUsage.Last.OutputTokens, true
}
