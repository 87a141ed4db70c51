package bus

import (
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// SendEvent publishes an event on a reply subject (core NATS: events are
// best-effort; the result is also durable on teamster.result.<attemptId>).
// e.Data must be valid JSON (a body made by Encode or json.Marshal).
func SendEvent(nc *nats.Conn, replyTo string, e *Event) error {
	bp := eventBufs.Get().(*[]byte)
	b, err := AppendEvent((*bp)[:0], e)
	if err == nil {
		err = nc.Publish(replyTo, b) // copies b into the connection's buffer
	}
	if cap(b) <= maxPooledEvent {
		*bp = b
		eventBufs.Put(bp)
	}
	return err
}

// maxPooledEvent bounds the buffers SendEvent keeps for reuse: a turn whose
// result is large does not pin a large buffer in the pool.
const maxPooledEvent = 16 << 10

var eventBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// AppendEvent appends e's envelope to dst: what Encode(e) produces, byte for
// byte, written directly. An event is sent for every step of every turn, and
// the generic encoder re-validates and copies the data it wraps each time.
// e.Data must be valid JSON; it is written as it is. An attempt id or type
// that would need escaping (never one that passed validation) takes the
// generic encoder.
func AppendEvent(dst []byte, e *Event) ([]byte, error) {
	if !plainJSONString(e.AttemptID) || !plainJSONString(e.Type) {
		b, err := Encode(e)
		return append(dst, b...), err
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(e.V), 10)
	dst = append(dst, `,"attemptId":"`...)
	dst = append(dst, e.AttemptID...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendInt(dst, e.Seq, 10)
	dst = append(dst, `,"type":"`...)
	dst = append(dst, e.Type...)
	dst = append(dst, '"')
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, e.Data...)
	}
	return append(dst, '}'), nil
}

// plainJSONString reports whether s can be written between quotes as it is:
// printable ASCII without a quote, a backslash, or the characters the
// generic encoder escapes for HTML (<, >, &).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
