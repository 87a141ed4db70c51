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
