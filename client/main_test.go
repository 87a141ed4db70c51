package client_test

import (
	"testing"

	"github.com/teamster-fleet/teamster/internal/testenv"
)

// The tests start their own fleets (internal/fleettest); testenv.Main fails
// the binary when they leave a goroutine running.
func TestMain(m *testing.M) { testenv.Main(m, nil) }
