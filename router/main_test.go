package router

import (
	"testing"

	"github.com/teamster-fleet/teamster/internal/testenv"
)

// The tests start their own servers; testenv.Main fails the binary when
// they leave a goroutine running (a registry watch, a reaper, a handler).
func TestMain(m *testing.M) { testenv.Main(m, nil) }
