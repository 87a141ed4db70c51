package leases

import "github.com/redis/go-redis/v9"

// Every script below touches the keys of one hash slot only: the session's
// {s} keys (with the node marker of the session's slot, whose tag is chosen
// to fall in that slot), one source's {id} key, or one reaper index shard. Scripts that walk the
// session's order derive the record key of an earlier entry from the session
// prefix they are given (ARGV), which carries the same hash tag, so those keys
// share the slot by construction. Time comes from Redis (TIME), so every
// router and worker measures deadlines on one clock.

// prelude holds the helpers shared by the scripts.
const prelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- node_id is the replication id of the node running the script: a node
-- gets a new one when it is promoted from replica and when it restarts, the
-- two ways a node can come to serve a slot without its previous primary's
-- last writes.
local function node_id()
  return string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
end
-- holds says whether the lease hash at key is held by holder, for attempt,
-- under fence: all three, so that no lease is ever taken for another's.
local function holds(key, holder, attempt, fence)
  local l = redis.call('HMGET', key, 'holder', 'attempt', 'fence')
  return l[1] == holder and l[2] == attempt and l[3] == fence
end
-- update_record applies field, value pairs from ARGV[first..] to a hash in
-- two calls: an empty value deletes its field; extra pairs are set after
-- the update (so they win over a field of the same name).
local function update_record(key, first, ...)
  local set, del = {}, {}
  for i = first, #ARGV, 2 do
    if ARGV[i + 1] == '' then
      del[#del + 1] = ARGV[i]
    else
      set[#set + 1] = ARGV[i]
      set[#set + 1] = ARGV[i + 1]
    end
  end
  if #del > 0 then redis.call('HDEL', key, unpack(del)) end
  for _, v in ipairs({...}) do set[#set + 1] = v end
  if #set > 0 then redis.call('HSET', key, unpack(set)) end
end
-- fleet_outcome records a fleet outcome (queue_timeout, worker_lost) on an
-- attempt record that has none yet: first writer wins.
local function fleet_outcome(key, code, now, ttl)
  if redis.call('HEXISTS', key, 'outcome') == 1 then return false end
  redis.call('HSET', key, 'state', 'finished', 'outcome', code, 'finished', now, 'by', 'fleet')
  redis.call('PEXPIRE', key, ttl)
  return true
end
`

// acceptScript records an attempt as accepted and appends it to its session's
// order, unless the attempt id is known already: an attempt id is bound to
// the attempt first accepted under it. A resubmit of the same attempt (same
// digest) is answered from the existing record and never appended twice; a
// different attempt under a known id is refused and changes nothing.
//
// KEYS[1] teamster:{s}:attempt:<attemptId>
// KEYS[2] teamster:{s}:order
// ARGV[1] attemptId
// ARGV[2] queue timeout (ms); the queue deadline is now + this
// ARGV[3] record TTL (ms)
// ARGV[4] the attempt's digest (bus.AttemptDigest), stored as "digest"
// ARGV[5..] field, value pairs stored on the record (harness, replyTo, reply, ...)
// Returns {status, state, reply, deadline, harness, replyTo}: status
// "accepted" for a new attempt, "exists" for a known one with the same digest
// (with its stored state, reply, harness and replyTo), or {"conflict"} for a
// known id whose record holds another digest.
var acceptScript = redis.NewScript(prelude + `
if redis.call('EXISTS', KEYS[1]) == 1 then
  local r = redis.call('HMGET', KEYS[1], 'digest', 'state', 'reply', 'deadline', 'harness', 'replyTo')
  if r[1] ~= ARGV[4] then return {'conflict'} end
  return {'exists', r[2] or '', r[3] or '', r[4] or '0', r[5] or '', r[6] or ''}
end
local now = now_ms()
local deadline = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'state', 'accepted', 'accepted', now, 'deadline', deadline, 'digest', ARGV[4], unpack(ARGV, 5))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[1])
return {'accepted', 'accepted', '', tostring(deadline), '', ''}
`)

// unacceptScript removes an attempt that the router could not publish, but only
// while it is still queued.
//
// KEYS[1] teamster:{s}:attempt:<attemptId>
// KEYS[2] teamster:{s}:order
// ARGV[1] attemptId
// Returns 1 when removed, 0 when the attempt was no longer queued.
var unacceptScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'state') ~= 'accepted' then return 0 end
redis.call('DEL', KEYS[1])
redis.call('LREM', KEYS[2], 0, ARGV[1])
return 1
`)

// claimScript claims an attempt under a new session lease. The attempt must be
// accepted (never claimed, no outcome), within its queue deadline, the head of
// its session's order, and the session must hold no lease. On the way it drops
// order heads that can never run: records that are gone or finished, queued
// attempts past their deadline (given the fleet outcome queue_timeout) and claimed attempts
// whose lease is gone (given worker_lost).
//
// Fences survive failovers (docs/ARCHITECTURE.md, "Fencing across
// failovers"). The fence hash records the node (its replication id) on which
// its epoch began. A claim on any other node, or on a session without a fence
// hash, starts a new epoch, so a fence handed out by a node whose writes were
// lost is never handed out again. A new epoch waits for the quarantine: until
// the quarantine has passed since the fleet first saw this node serve the
// session's slot (the slot's node marker, KEYS[6]), a lease granted by the
// node before (whose holder may not have noticed the failover yet; it
// self-fences at ttl - margin at the latest) may still be running.
//
// KEYS[1] teamster:{s}:order
// KEYS[2] teamster:{s}:attempt:<attemptId>
// KEYS[3] teamster:{s}:lease
// KEYS[4] teamster:{s}:fence
// KEYS[5] teamster:{s}:session
// KEYS[6] teamster:{<slot tag>}:node, the node marker of the session's slot
// ARGV[1] attemptId
// ARGV[2] holder (worker id)
// ARGV[3] lease TTL (ms)
// ARGV[4] a fresh random epoch id, used when a new epoch starts
// ARGV[5] the first reservation of event seq numbers
// ARGV[6] the session prefix teamster:{s}: (for the records of earlier entries)
// ARGV[7] TTL (ms) of a record once finished
// ARGV[8] the claim's token, unique per claim call: a retried call (a client
// retrying after a lost reply) that finds the attempt claimed with its own
// token gets the same claim back instead of "done"
// ARGV[9] the quarantine (ms) of a new epoch on a node the fleet has just
// seen serve the slot; 0 for none
// ARGV[10] the harness id whose subject the message came on: an attempt runs
// only on the harness it was accepted for
// Returns {"claimed", fence, now, acceptedAt, concluded, field, value, ...} with
// the session record's fields read under the new lease, {"busy", blocker,
// concluded, how} (how: "accepted" or "claimed", the blocker's state as an
// earlier head of the order, or "leased": it holds the session's lease),
// {"done", state}, {"expired"} (the queue deadline passed:
// queue_timeout recorded), {"quarantine", ms still to wait, concluded},
// {"foreign", harness} (the record names another harness: the message is not
// this attempt's; nothing changed) or {"missing"}. concluded is the
// space-separated ids of earlier heads the walk gave a fleet outcome (queue_timeout,
// worker_lost): the caller points the reapers at them, since their index
// entries may still sit at their queue deadlines.
var claimScript = redis.NewScript(prelude + `
local now = now_ms()
local st = redis.call('HMGET', KEYS[2], 'state', 'deadline', 'accepted', 'ctoken', 'fence', 'claimed', 'harness')
if not st[1] then return {'missing'} end
if st[7] ~= ARGV[10] then return {'foreign', st[7] or ''} end
if st[1] == 'claimed' and st[4] == ARGV[8] and holds(KEYS[3], ARGV[2], ARGV[1], st[5]) then
  local out = {'claimed', st[5], st[6], st[3] or st[6], ''}
  for _, v in ipairs(redis.call('HGETALL', KEYS[5])) do out[#out + 1] = v end
  return out
end
if st[1] ~= 'accepted' then return {'done', st[1]} end
if now >= tonumber(st[2]) then
  fleet_outcome(KEYS[2], 'queue_timeout', now, ARGV[7])
  redis.call('LREM', KEYS[1], 0, ARGV[1])
  return {'expired'}
end
local concluded = {}
while true do
  local head = redis.call('LINDEX', KEYS[1], 0)
  if (not head) or head == ARGV[1] then break end
  local hk = ARGV[6] .. 'attempt:' .. head
  local h = redis.call('HMGET', hk, 'state', 'deadline')
  if (not h[1]) or h[1] == 'finished' then
    redis.call('LPOP', KEYS[1])
  elseif h[1] == 'accepted' and now >= tonumber(h[2]) then
    if fleet_outcome(hk, 'queue_timeout', now, ARGV[7]) then concluded[#concluded + 1] = head end
    redis.call('LPOP', KEYS[1])
  elseif h[1] == 'claimed' and redis.call('EXISTS', KEYS[3]) == 0 then
    if fleet_outcome(hk, 'worker_lost', now, ARGV[7]) then concluded[#concluded + 1] = head end
    redis.call('LPOP', KEYS[1])
  else
    return {'busy', head, table.concat(concluded, ' '), h[1]}
  end
end
concluded = table.concat(concluded, ' ')
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {'busy', redis.call('HGET', KEYS[3], 'attempt') or '', concluded, 'leased'}
end
local node = node_id()
local f = redis.call('HMGET', KEYS[4], 'epoch', 'node')
local epoch = f[1]
if (not epoch) or f[2] ~= node then
  local m = redis.call('HMGET', KEYS[6], 'node', 'since')
  local since = tonumber(m[2] or '')
  if m[1] ~= node or not since then
    since = now
    redis.call('HSET', KEYS[6], 'node', node, 'since', now)
  end
  local wait = since + tonumber(ARGV[9]) - now
  if wait > 0 then return {'quarantine', tostring(wait), concluded} end
  epoch = ARGV[4]
  redis.call('HSET', KEYS[4], 'epoch', epoch, 'n', 0, 'node', node)
end
local fence = epoch .. ':' .. redis.call('HINCRBY', KEYS[4], 'n', 1)
redis.call('HSET', KEYS[3], 'holder', ARGV[2], 'attempt', ARGV[1], 'fence', fence)
redis.call('PEXPIRE', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[2], 'state', 'claimed', 'worker', ARGV[2], 'fence', fence, 'claimed', now, 'seqmax', ARGV[5], 'ctoken', ARGV[8])
local out = {'claimed', fence, tostring(now), st[3] or tostring(now), concluded}
for _, v in ipairs(redis.call('HGETALL', KEYS[5])) do out[#out + 1] = v end
return out
`)

// markNodeScript records that the fleet has seen the node running it serve
// the marker's slot: when the marker names another node (or none), it is
// set to this node, from now. Routers run it over every slot when a node's
// replication id changes (Store.MarkNodes), so that the quarantine of a
// slot starts when the node began to serve it, not at the slot's first claim
// long after; claimScript does the same for its own slot.
//
// KEYS[1] teamster:{<slot tag>}:node
// Returns 1 when the marker was set, 0 when it named this node already.
var markNodeScript = redis.NewScript(prelude + `
local node = node_id()
if redis.call('HGET', KEYS[1], 'node') == node then return 0 end
redis.call('HSET', KEYS[1], 'node', node, 'since', now_ms())
return 1
`)

// renewScript extends a held lease and raises the attempt's event seq
// reservation. It is sent for many leases at once in one pipeline.
//
// KEYS[1] teamster:{s}:lease
// KEYS[2] teamster:{s}:attempt:<attemptId>
// ARGV[1] fence
// ARGV[2] lease TTL (ms)
// ARGV[3] event seq reservation (never lowered)
// ARGV[4] holder
// ARGV[5] attemptId
// Returns 1 when renewed, 0 when the lease is gone or not the caller's
// (another holder, attempt or fence).
var renewScript = redis.NewScript(prelude + `
if not holds(KEYS[1], ARGV[4], ARGV[5], ARGV[1]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[2], 'seqmax') or '0')
if tonumber(ARGV[3]) > cur then redis.call('HSET', KEYS[2], 'seqmax', ARGV[3]) end
return 1
`)

// releaseScript deletes a lease its caller holds.
//
// KEYS[1] teamster:{s}:lease
// ARGV[1] fence
// ARGV[2] holder
// ARGV[3] attemptId
// Returns 1 when released, 0 when the lease is gone or not the caller's.
var releaseScript = redis.NewScript(prelude + `
if not holds(KEYS[1], ARGV[2], ARGV[3], ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// finishScript is the fenced finish: it records the attempt's outcome (first
// writer wins), writes the session record, removes the attempt from the order
// and releases the lease, in one step. It refuses unless the attempt was
// claimed under fence and the lease is still held under it.
//
// KEYS[1] teamster:{s}:order
// KEYS[2] teamster:{s}:attempt:<attemptId>
// KEYS[3] teamster:{s}:lease
// KEYS[4] teamster:{s}:session
// ARGV[1] attemptId
// ARGV[2] fence
// ARGV[3] outcome: "ok" or an error code
// ARGV[4] the encoded result
// ARGV[5] TTL (ms) of the finished record
// ARGV[6] holder
// ARGV[7..] session record field, value pairs; an empty value deletes the field
// Returns "ok" (also for a retry of the same finish whose reply was lost),
// "fenced" (lease lost), "finished" (another outcome exists) or "missing" (no
// record: Redis lost it).
var finishScript = redis.NewScript(prelude + `
local st = redis.call('HMGET', KEYS[2], 'state', 'fence', 'outcome', 'result')
if not st[1] then return 'missing' end
if st[3] then
  -- A retry of this very finish (its reply was lost) is answered ok.
  if st[2] == ARGV[2] and st[3] == ARGV[3] and st[4] == ARGV[4] then return 'ok' end
  return 'finished'
end
if st[2] ~= ARGV[2] or not holds(KEYS[3], ARGV[6], ARGV[1], ARGV[2]) then return 'fenced' end
local now = now_ms()
redis.call('HSET', KEYS[2], 'state', 'finished', 'outcome', ARGV[3], 'result', ARGV[4], 'finished', now, 'by', 'worker')
redis.call('PEXPIRE', KEYS[2], ARGV[5])
if #ARGV >= 8 then update_record(KEYS[4], 7, 'fence', ARGV[2], 'updated', now) end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('DEL', KEYS[3])
return 'ok'
`)

// abandonScript records the outcome of an attempt whose worker lost its lease
// (lease_lost, or a run that ended after the loss). It writes no session
// record: a worker without its lease commits nothing. First writer wins, so a
// worker_lost recorded by the fleet stays. An attempt still recorded as
// accepted was claimed on a node whose writes were lost (a failover): the
// worker did claim it and acknowledged its message, so nobody else ever
// will, and the outcome is recorded all the same, so that the attempt is
// answered and its session's later turns are not held behind it.
//
// KEYS[1] teamster:{s}:order
// KEYS[2] teamster:{s}:attempt:<attemptId>
// KEYS[3] teamster:{s}:lease
// ARGV[1] attemptId
// ARGV[2] fence the attempt was claimed under
// ARGV[3] outcome (an error code)
// ARGV[4] the encoded result
// ARGV[5] TTL (ms) of the finished record
// ARGV[6] holder
// Returns "ok", "finished", "fenced" (claimed under another fence) or "missing".
var abandonScript = redis.NewScript(prelude + `
local st = redis.call('HMGET', KEYS[2], 'state', 'fence', 'outcome', 'result')
if not st[1] then return 'missing' end
if st[3] then
  if st[2] == ARGV[2] and st[3] == ARGV[3] and st[4] == ARGV[4] then return 'ok' end
  return 'finished'
end
if st[1] ~= 'accepted' and st[2] ~= ARGV[2] then return 'fenced' end
local now = now_ms()
redis.call('HSET', KEYS[2], 'state', 'finished', 'outcome', ARGV[3], 'result', ARGV[4], 'finished', now, 'by', 'worker')
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('LREM', KEYS[1], 0, ARGV[1])
if holds(KEYS[3], ARGV[6], ARGV[1], ARGV[2]) then redis.call('DEL', KEYS[3]) end
return 'ok'
`)

// unclaimScript gives back a claim that nothing acted on: the worker found,
// once the claim's reply arrived, that its lease was no longer current (a
// reply held up by a partition or a pause). The attempt becomes accepted
// again, still at the head of its order, so another claim runs it.
//
// KEYS[1] teamster:{s}:attempt:<attemptId>
// KEYS[2] teamster:{s}:lease
// ARGV[1] fence of the claim
// ARGV[2] holder
// ARGV[3] attemptId
// Returns 1 when given back, 0 when the attempt is no longer claimed under
// that fence (the fleet gave it an outcome: leave it).
var unclaimScript = redis.NewScript(prelude + `
local st = redis.call('HMGET', KEYS[1], 'state', 'fence', 'outcome')
if st[1] ~= 'claimed' or st[2] ~= ARGV[1] or st[3] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'accepted')
redis.call('HDEL', KEYS[1], 'worker', 'fence', 'claimed', 'ctoken')
if holds(KEYS[2], ARGV[2], ARGV[3], ARGV[1]) then redis.call('DEL', KEYS[2]) end
return 1
`)

// markPublishedScript marks an outcome as durably published, without
// re-creating a record that is gone, and drops the stored result: the
// results stream holds it now, and only a republish (of an outcome not yet
// marked) reads it from the record. The record keeps what answers a
// resubmit for the rest of its retention, whatever the result's size.
// First marker wins: whoever marks it sends the result event (docs/PROTOCOL.md:
// published, marked, and only then sent), so a worker and a reaper that
// both published the outcome never both send it. The mark is the marker's
// token, so a marker retrying after a lost reply is still the first. The
// mark's time ("pubat") opens the marker's send window: a mark not
// confirmed sent (sentScript) within it is taken over by a reaper, which
// sends the result event in its place (reapScript).
//
// KEYS[1] teamster:{s}:attempt:<attemptId>
// ARGV[1] the marker's token (non-empty)
// Returns 1 when marked by this token (now, or by an earlier try), 2 when
// marked by another, 0 when the record is gone.
var markPublishedScript = redis.NewScript(prelude + `
local st = redis.call('HMGET', KEYS[1], 'state', 'published')
if not st[1] then return 0 end
if st[2] then
  if st[2] == ARGV[1] then return 1 end
  return 2
end
redis.call('HSET', KEYS[1], 'published', ARGV[1], 'pubat', now_ms())
redis.call('HDEL', KEYS[1], 'result')
return 1
`)

// sentScript confirms that the marker holding the mark sent the result
// event: from then on no reaper sends it again.
//
// KEYS[1] teamster:{s}:attempt:<attemptId>
// ARGV[1] the marker's token
// Returns 1 when confirmed (now or before), 0 when the mark is another's (a
// reaper took it over) or the record is gone.
var sentScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'published') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'sent', 'true')
return 1
`)

// dueScript hands out the reaper index entries that are due, hiding each from
// other reapers for a visibility window (a reaper that dies mid-way leaves them
// to be picked up again).
//
// KEYS[1] teamster:{reaper-<k>}:due, one shard of the reaper index
// ARGV[1] at most this many entries
// ARGV[2] visibility window (ms)
// Returns the due members.
var dueScript = redis.NewScript(prelude + `
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), m)
end
return due
`)

// reapScript decides, and where due records, the fleet's outcome of one
// attempt: queue_timeout for a queued attempt past its deadline, worker_lost
// for a claimed attempt whose lease is gone. It also returns outcomes recorded
// by a worker that were not marked published within the grace period, and
// takes over marks whose marker did not confirm sending the result event
// within the send window (it died, or stalled, between its mark and its
// confirmation): the mark becomes the caller's, with a new send window.
//
// KEYS[1] teamster:{s}:order
// KEYS[2] teamster:{s}:attempt:<attemptId>
// KEYS[3] teamster:{s}:lease
// ARGV[1] attemptId
// ARGV[2] grace (ms) before a worker's unpublished outcome is published again
// ARGV[3] TTL (ms) of a record once finished
// ARGV[4] the send window (ms) of a mark
// ARGV[5] the caller's marker token, for a mark it takes over
// Returns {"gone"}, {"wait", atMs},
// {"publish", outcome, result, harness, worker, fence, replyTo, seqmax} or
// {"resend", outcome, "", harness, worker, fence, replyTo, seqmax} (the
// outcome is published and the mark is now the caller's: send the durable
// result as the result event, then confirm it with sentScript).
var reapScript = redis.NewScript(prelude + `
local now = now_ms()
local r = redis.call('HMGET', KEYS[2], 'state', 'deadline', 'published', 'finished', 'by', 'pubat', 'sent')
if not r[1] then return {'gone'} end
local action = 'publish'
if r[1] == 'accepted' then
  if now < tonumber(r[2]) then return {'wait', tostring(r[2])} end
  fleet_outcome(KEYS[2], 'queue_timeout', now, ARGV[3])
  redis.call('LREM', KEYS[1], 0, ARGV[1])
elseif r[1] == 'claimed' then
  if redis.call('HGET', KEYS[3], 'attempt') == ARGV[1] then
    return {'wait', tostring(now + math.max(redis.call('PTTL', KEYS[3]), 0))}
  end
  fleet_outcome(KEYS[2], 'worker_lost', now, ARGV[3])
  redis.call('LREM', KEYS[1], 0, ARGV[1])
elseif r[3] then
  -- Published. Sent, or marked before marks had a send window: nothing owed.
  if r[7] or not r[6] then return {'gone'} end
  local at = tonumber(r[6]) + tonumber(ARGV[4])
  if now < at then return {'wait', tostring(at)} end
  redis.call('HSET', KEYS[2], 'published', ARGV[5], 'pubat', now)
  action = 'resend'
else
  if r[5] == 'worker' then
    local at = tonumber(r[4] or '0') + tonumber(ARGV[2])
    if now < at then return {'wait', tostring(at)} end
  end
end
local f = redis.call('HMGET', KEYS[2], 'outcome', 'result', 'harness', 'worker', 'fence', 'replyTo', 'seqmax')
return {action, f[1] or '', f[2] or '', f[3] or '', f[4] or '', f[5] or '', f[6] or '', f[7] or '0'}
`)

// adoptScript makes an attempt's record agree with its durable result. The
// results stream keeps the first result published for an attempt and
// refuses any other: that result is the attempt's outcome. A record can
// disagree with it only after a failover lost writes (the worker's outcome
// went with the old primary, and the fleet gave the attempt its outcome again on the
// promoted one); the reaper that finds the stream holding another result
// than the one it tried to publish adopts it here, so the attempt has one
// outcome everywhere. A live lease is left alone.
//
// KEYS[1] teamster:{s}:order
// KEYS[2] teamster:{s}:attempt:<attemptId>
// ARGV[1] attemptId
// ARGV[2] the durable result's outcome ("ok" or its error code)
// ARGV[3] TTL (ms) of a record once finished
// Returns 1 when the record changed, 0 when it agreed already or is gone.
var adoptScript = redis.NewScript(prelude + `
local st = redis.call('HMGET', KEYS[2], 'state', 'outcome')
if not st[1] then return 0 end
if st[1] == 'finished' and st[2] == ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], 'state', 'finished', 'outcome', ARGV[2], 'by', 'stream', 'finished', now_ms())
redis.call('HDEL', KEYS[2], 'result')
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('LREM', KEYS[1], 0, ARGV[1])
return 1
`)

// grantScript grants a source authority generation. A revoked generation, and
// every one below it, can never be granted again; a grant never lowers the
// current generation.
//
// KEYS[1] teamster:source:{<id>}
// ARGV[1] generation, 1..2^53-1 (exact as a Lua number; stored as given)
// Returns {"ok", generation} or {"stale", the generation it must exceed or reach}.
var grantScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'generation', 'revoked')
local g = tonumber(ARGV[1])
local revoked = tonumber(r[2] or '0')
if g <= revoked then return {'stale', string.format('%.0f', revoked + 1)} end
local cur = tonumber(r[1] or '0')
if g < cur then return {'stale', string.format('%.0f', cur)} end
redis.call('HSET', KEYS[1], 'generation', ARGV[1])
return {'ok', ARGV[1]}
`)

// revokeScript revokes a source authority: permanently, for every generation
// up to the current one.
//
// KEYS[1] teamster:source:{<id>}
// Returns the highest revoked generation (0, writing nothing, when none was
// ever granted).
var revokeScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'generation', 'revoked')
if not r[1] and not r[2] then return 0 end
local revoked = math.max(tonumber(r[1] or '0'), tonumber(r[2] or '0'))
redis.call('HSET', KEYS[1], 'revoked', revoked)
redis.call('HDEL', KEYS[1], 'generation')
return revoked
`)

// allScripts is every script, for loading them up front.
var allScripts = []*redis.Script{
	acceptScript, unacceptScript, claimScript, markNodeScript, renewScript, releaseScript,
	finishScript, abandonScript, markPublishedScript, sentScript, dueScript,
	reapScript, adoptScript, grantScript, revokeScript, sessionOpScript, unclaimScript,
}
