// Package logging holds what teamster's components share about their
// logrus loggers.
package logging

import "github.com/sirupsen/logrus"

// DebugEnabled reports whether l logs at debug level (true when it cannot
// tell). Components check it once, so that a hot path does not build the
// fields of a debug line that would be dropped.
func DebugEnabled(l logrus.FieldLogger) bool {
	switch v := l.(type) {
	case *logrus.Entry:
		return v.Logger.IsLevelEnabled(logrus.DebugLevel)
	case *logrus.Logger:
		return v.IsLevelEnabled(logrus.DebugLevel)
	}
	return true
}

// Lifecycle logs the steps of an attempt (accepted, claimed, finished,
// delivered) at one level: info by default, debug where a fleet runs so many
// attempts that a line for each step is too much. Whether the level is
// enabled is decided once, so that a step that would not be logged builds no
// fields.
type Lifecycle struct {
	level logrus.Level
	on    bool
}

// NewLifecycle logs the steps at debug when debug is set, else at info, on
// the level l enables.
func NewLifecycle(l logrus.FieldLogger, debug bool) Lifecycle {
	level := logrus.InfoLevel
	if debug {
		level = logrus.DebugLevel
	}
	on := true
	switch v := l.(type) {
	case *logrus.Entry:
		on = v.Logger.IsLevelEnabled(level)
	case *logrus.Logger:
		on = v.IsLevelEnabled(level)
	}
	return Lifecycle{level: level, on: on}
}

// Enabled says the steps are logged.
func (c Lifecycle) Enabled() bool { return c.on }

// Log logs msg at the lifecycle level.
func (c Lifecycle) Log(l logrus.FieldLogger, msg string) {
	if !c.on {
		return
	}
	switch v := l.(type) {
	case *logrus.Entry:
		v.Log(c.level, msg)
	case *logrus.Logger:
		v.Log(c.level, msg)
	default:
		l.Info(msg)
	}
}
