package claude

// usageMeter turns the API stream events the CLI relays into one report
// per completed model response: message_start carries the response's id
// (the Messages API message id, msg_...) and its usage so far,
// message_delta the response's cumulative output tokens, and message_stop
// says the response completed; a response abandoned before message_stop
// (an interrupt, a steer with priority "now") is not reported. The id is
// reported at most once per turn. A meter serves one turn, from the loop's
// goroutine only.
type usageMeter struct {
	id       string // the response streaming now, "" between responses
	tokens   int64
	reported map[string]bool
}

func (u *usageMeter) start(id string, usage *apiUsage) {
	u.id, u.tokens = id, 0
	if usage != nil {
		u.tokens = usage.OutputTokens
	}
}

func (u *usageMeter) delta(usage *apiUsage) {
	if usage != nil && usage.OutputTokens > 0 {
		u.tokens = usage.OutputTokens
	}
}

// stop ends the current response; ok says it is to be reported.
func (u *usageMeter) stop() (id string, tokens int64, ok bool) {
	id, tokens = u.id, u.tokens
	u.id, u.tokens = "", 0
	if id == "" || u.reported[id] {
		return "", 0, false
	}
	if u.reported == nil {
		u.reported = map[string]bool{}
	}
	u.reported[id] = true
	return id, tokens, true
}
