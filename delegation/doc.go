// Package delegation decides whether a delegate may run an attempt of a
// session it does not own, and refuses delegates the owner-only session
// operations (docs/PROTOCOL.md, "Delegated execution"; OpenClaw's "Delegated
// execution" of agent-harness plugins).
//
// It is pure: no I/O, no clock, no NATS or Redis. It imports only the standard
// library, the root package (for teamster.Error and teamster.SessionRecord,
// the session record as leases reads it) and selection (for Manifest). It
// deliberately does not import leases or bus, so that it stays a leaf both the
// router and the worker can call: the caller passes the record it read and
// the session facts of its bus.Attempt as a Request.
//
// # Who is a delegate
//
// A delegate is the plugin named by the subject it submitted on,
// teamster.submit.delegate.<pluginId> (the router) or by the Teamster-Delegate
// header the router set (the worker). Owners submit on teamster.submit and
// never reach Check: the caller calls Check for delegate submissions only. An
// empty Request.Delegate is therefore a caller error and Check refuses it with
// invalid_request (field "delegate") instead of treating it as an owner.
//
// The owner is never treated as a delegate. A request whose delegate id is
// the session's owner plugin (the record's ownerPluginId, or the pinned
// harness's pluginId) is refused with delegation_denied, field "delegate",
// even when the manifest lists that id in delegatedExecutionPluginIds: an
// owner submits on teamster.submit, where it keeps its owner rights, and the
// delegate path must not become a second way in for it.
//
// # The checks, in order
//
// Check runs these checks in this fixed order and reports only the first that
// fails. Each names a field (the Field constants); the message is
// "field <name> <reason>" and never contains a value, because session keys,
// store paths and ids can be private. DeniedField reads the field back, also
// from an error decoded from a reply.
//
//  1. delegate: the delegate id is not empty (else invalid_request).
//  2. record: the session has a stored record.
//  3. delegate: the delegate is not the record's ownerPluginId.
//  4. record.agentHarnessId: the record pins a harness.
//  5. manifest: the manifest the caller passed is the pinned harness's
//     (its id equals the record's agentHarnessId); a zero Manifest, for a
//     pinned harness no live worker registers, fails here.
//  6. delegate: the delegate is not the pinned harness's pluginId.
//  7. delegatedExecutionPluginIds: the pinned harness's manifest lists the
//     delegate.
//  8. record.ownerPluginId: the record's ownerPluginId, when set, equals the
//     pinned harness's pluginId.
//  9. record.modelSelectionLocked: the record has modelSelectionLocked true.
//  10. sessionKey: the attempt's sessionKey is not empty and equals the
//     record's.
//  11. sessionId: likewise.
//  12. storePath: equals the record's (both empty is equal: storePath is
//     optional in an attempt, and an owner turn without one stored none).
//  13. agentId: not empty and equals the record's.
//  14. modelSelectionLocked: the attempt carries modelSelectionLocked true.
//  15. agentHarnessId: the attempt's agentHarnessId is the pinned harness.
//  16. agentHarnessRuntimeOverride: the attempt's
//     agentHarnessRuntimeOverride is the pinned harness (empty, "auto" or
//     "default" is not).
//
// Every failure after step 1 is delegation_denied. A mismatch between the
// attempt and the record is named by the attempt's field (sessionKey, not
// record.sessionKey); facts of the record alone carry the "record." prefix.
// Comparisons are exact: no trimming, no case folding.
//
// The router runs Check on submit against the record it reads then; the
// worker runs it again under the session lease, and the worker's verdict is
// the authoritative one.
//
// # Owner-only operations
//
// Session create, patch, reset, delete and archive (teamster.session.<op>)
// are owner-only: OwnerOnly refuses any delegate with owner_only, whatever the
// op, so the router refuses them even if NATS permissions were to let a
// delegate through.
package delegation
