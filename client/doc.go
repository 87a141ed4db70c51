// Package client is the Go API of teamster for gateways and delegates.
//
// A gateway keeps one [Client] on a NATS connection it owns. With it, it:
//
//   - submits a turn ([Client.Submit]; a delegate plugin continuing a locked
//     session, [Client.SubmitAsDelegate]) and follows it through its
//     [Handle]: its events in order ([Handle.Events]) and its one terminal
//     result ([Handle.Result]). A refused submit is a [*RejectedError];
//   - reads an attempt's durable result by its id ([Client.Result],
//     [Client.WaitResult]), for instance after a restart;
//   - steers a running turn ([Client.Inject]) or cancels it
//     ([Client.Cancel]);
//   - runs the owner's operations on a session's record
//     ([Client.SessionOp]);
//   - grants and revokes the source authorities that source-bound input
//     carries ([Client.GrantSource], [Client.RevokeSource]);
//   - answers the host callbacks (tools, user input, usage) of the turns it
//     submits with its host id ([Client.ServeHost], [Tools]).
//
// Errors that come from the fleet are *teamster.Error values: test them with
// errors.Is against the teamster.Err* sentinels, or teamster.CodeOf. Bad
// input the client can check itself (an attempt id, a plugin id, a host id or
// a session op that no subject can carry) is invalid_request before anything
// is sent.
//
// The files of the package, by concern:
//
//	client.go   the Client: New, Conn, Close
//	submit.go   Submit, SubmitAsDelegate, and sending a submit again when its reply is lost
//	follow.go   routing the events of submitted attempts to their handles
//	handle.go   Handle: events, result, close
//	result.go   reading durable results
//	inject.go   Inject and Cancel: requests to a running turn
//	session.go  session operations
//	sources.go  source grants and revokes
//	request.go  the request/reply plumbing shared by the router requests
//	errors.go   the errors the client returns itself
//	host.go     serving host callbacks (ServeHost)
//	tools.go    Tools, a Host with a tool registry
package client
