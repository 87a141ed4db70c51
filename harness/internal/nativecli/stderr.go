package nativecli

import (
	"bytes"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// StderrLogger logs a CLI's stderr a line at a time, at debug level, each
// line cut to 1 KiB, and keeps the last line for error messages. The CLIs do
// not print their environment; the harnesses never log its values.
type StderrLogger struct {
	mu       sync.Mutex
	log      logrus.FieldLogger
	buf      []byte
	lastLine string
}

// NewStderrLogger returns a StderrLogger logging to log.
func NewStderrLogger(log logrus.FieldLogger) *StderrLogger { return &StderrLogger{log: log} }

// SetLog makes l log to log from now on.
func (l *StderrLogger) SetLog(log logrus.FieldLogger) {
	l.mu.Lock()
	l.log = log
	l.mu.Unlock()
}

func (l *StderrLogger) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.emit(l.buf)
		l.buf = nil
	}
	return len(b), nil
}

func (l *StderrLogger) emit(line []byte) {
	s := strings.TrimSpace(string(line))
	if s == "" {
		return
	}
	if len(s) > 1024 {
		s = s[:1024] + "…"
	}
	l.lastLine = s
	l.log.WithField("stream", "stderr").Debug(s)
}

// Last is the last line logged, cut to 300 bytes; "" when none.
func (l *StderrLogger) Last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.lastLine
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
