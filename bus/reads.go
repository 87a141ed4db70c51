package bus

import (
	"encoding/json"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/selection"
)

// A gateway's reads, answered by the routers (teamster.get.result,
// teamster.get.harnesses; SubjectGetResult says why gateways read through
// them and not from JetStream).

// ResultRequest asks the routers for an attempt's durable result
// (teamster.get.result): the attempt is the sender's (its tenant's
// namespace).
type ResultRequest struct {
	V         int    `json:"v"`
	AttemptID string `json:"attemptId"`
}

// Validate checks a result request.
func (r *ResultRequest) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	return CheckID("attemptId", r.AttemptID)
}

// ResultReply answers a result request: status ok with the stored result
// (its bytes as stored, the body of teamster.result.<...>) or, when the
// attempt has none (yet, any more, or it is no attempt of the sender's), ok
// without one.
type ResultReply struct {
	V      int             `json:"v"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *teamster.Error `json:"error,omitempty"`
}

// Validate checks a result reply.
func (r *ResultReply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	return checkReplyStatus(r.Status, r.Error, StatusOK, StatusRejected)
}

// HarnessesRequest asks the routers for the harnesses the fleet hosts now
// (teamster.get.harnesses).
type HarnessesRequest struct {
	V int `json:"v"`
}

// Validate checks a harnesses request.
func (r *HarnessesRequest) Validate() error { return checkVersion(r.V) }

// HarnessesReply answers a harnesses request: the manifests live (active or
// draining) workers advertise, as the answering router sees the registry.
type HarnessesReply struct {
	V         int                  `json:"v"`
	Status    string               `json:"status"`
	Harnesses []selection.Manifest `json:"harnesses"`
	Error     *teamster.Error      `json:"error,omitempty"`
}

// Validate checks a harnesses reply.
func (r *HarnessesReply) Validate() error {
	if err := checkVersion(r.V); err != nil {
		return err
	}
	return checkReplyStatus(r.Status, r.Error, StatusOK, StatusRejected)
}
