package bus

import "encoding/json"

// sessionOpBody is how a session op body is read: a SessionOp, plus a
// "delegate" key, which marks the request as a delegate's.
type sessionOpBody struct {
	SessionOp
	Delegate json.RawMessage `json:"delegate,omitempty"`
}

func (s *sessionOpBody) Validate() error { return s.SessionOp.Validate() }

// DecodeSessionOp reads a teamster.session.<op> body. fromDelegate reports
// whether the body claims a delegate identity (a "delegate" key, whatever its
// value): session operations are owner-only, so the router refuses those.
func DecodeSessionOp(b []byte) (op *SessionOp, fromDelegate bool, err error) {
	var body sessionOpBody
	if err := Decode(b, &body); err != nil {
		return nil, false, err
	}
	return &body.SessionOp, body.Delegate != nil, nil
}

// HarnessReset asks a worker hosting a harness to clear the native state it
// keeps for a session (the harness's reset), after the owner reset or deleted
// the session. It travels on teamster.harness.<harnessId>.reset.
type HarnessReset struct {
	V          int             `json:"v"`
	SessionKey string          `json:"sessionKey"`
	Binding    json.RawMessage `json:"binding,omitempty"`
}

// Validate checks a harness reset request.
func (h *HarnessReset) Validate() error {
	if err := checkVersion(h.V); err != nil {
		return err
	}
	return requireString("sessionKey", h.SessionKey, maxKeyLen)
}

// HarnessResetSubject is teamster.harness.<harnessId>.reset, served by every
// worker hosting the harness in queue group harness_<harnessId>.
func HarnessResetSubject(harnessID string) (string, error) {
	if err := CheckID("harnessId", harnessID); err != nil {
		return "", err
	}
	return "teamster.harness." + harnessID + ".reset", nil
}
