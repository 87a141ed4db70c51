package worker

import (
	"context"

	"github.com/teamster-fleet/teamster"
	"github.com/teamster-fleet/teamster/bus"
	"github.com/teamster-fleet/teamster/harness"
)

// A settled-turn finalization (an attempt with operation
// settled-tool-finalization, docs/PROTOCOL.md): the worker runs it like a
// turn, under the session's lease and in its order, but only on a harness
// that can enforce its restrictions (harness.Finalizer), through its
// FinalizeSettledTurn, with a host that refuses tools and questions and
// with no steering (turn_inject.go refuses it).

// finalization reports whether the run is a settled-turn finalization.
func (r *run) finalization() bool {
	return r.attempt.Operation == bus.OperationSettledToolFinalization
}

// checkFinalizer refuses a finalization to a harness that cannot enforce
// it: nil when the run is no finalization or the harness is a Finalizer.
func (r *run) checkFinalizer() *teamster.Error {
	if !r.finalization() {
		return nil
	}
	if _, ok := r.h.impl.(harness.Finalizer); ok {
		return nil
	}
	return teamster.Errorf(teamster.CodeHarnessUnsupportedRoute,
		"harness %s cannot run a settled-turn finalization: it cannot enforce a tool-less follow-up on the session's thread", r.harnessID).
		WithSideEffects(teamster.SideEffectsNone)
}

// finalHost is a finalization's host: events and usage go through, tools
// and questions are refused whatever the harness asks.
type finalHost struct{ *host }

func (finalHost) Tool(context.Context, bus.ToolCall) (*bus.ToolReply, error) {
	return nil, teamster.Errorf(teamster.CodeInvalidRequest, "a settled-turn finalization has no tools")
}

func (finalHost) ToolTerminal(context.Context, bus.ToolTerminal) (*bus.ToolTerminalReply, error) {
	return nil, teamster.Errorf(teamster.CodeInvalidRequest, "a settled-turn finalization has no tools")
}

func (finalHost) UserInput(context.Context, bus.UserInput) (*bus.UserInputReply, error) {
	return nil, teamster.Errorf(teamster.CodeInvalidRequest, "a settled-turn finalization asks no questions")
}
