package bus

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Transient says whether a JetStream API error may pass by trying again:
// no answer in time (a stream or meta leader election, a cluster still
// forming), no responders (JetStream not up yet), or a server answer that
// JetStream is unavailable (HTTP-like code 503). A refusal of the request
// itself (a bad or conflicting configuration, a permission) is not.
func Transient(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code >= 500 || api.Code == 408
	}
	return err != nil
}
