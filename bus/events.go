package bus

import "github.com/nats-io/nats.go"

// SendEvent publishes an event on a reply subject (core NATS: events are
// best-effort; the result is also durable on teamster.result.<attemptId>).
func SendEvent(nc *nats.Conn, replyTo string, e *Event) error {
	b, err := Encode(e)
	if err != nil {
		return err
	}
	return nc.Publish(replyTo, b)
}
