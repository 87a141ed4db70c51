package leases

import (
	"strconv"
	"strings"
	"sync"
)

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// hashSlot is Redis Cluster's slot of a key: CRC16 (XMODEM) of its hash tag
// (the part between the first '{' and the next '}', when not empty), mod 16384.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % Slots
}

// slotTags maps every hash slot to a short hash tag in it ("n" and a base-36
// number, the first that lands in the slot), so that a key of one slot's own
// can be named: the node marker (nodeKey) sits in the slot of the sessions it
// speaks for, and a session script reads it without leaving its slot. The
// table is the same in every process: it depends only on CRC16.
var slotTags = sync.OnceValue(func() []string {
	tags := make([]string, Slots)
	left := Slots
	for n := 0; left > 0; n++ {
		t := "n" + strconv.FormatInt(int64(n), 36)
		if s := hashSlot(t); tags[s] == "" {
			tags[s] = t
			left--
		}
	}
	return tags
})

// nodeKey is teamster:{<slot tag>}:node, the node marker of a hash slot: the
// replication id of the Redis node that serves the slot and the time (that
// node's clock) at which the fleet first saw it serve it. See claimScript.
func nodeKey(slot int) string { return keyRoot + "{" + slotTags()[slot] + "}:node" }

// nodeKeyOf is the node marker of the slot a session's keys are in.
func (k sessionKeys) node() string { return nodeKey(hashSlot(k.tag)) }

// SlotOf is the Redis Cluster hash slot of every key of a session.
func SlotOf(sessionKey string) int { return hashSlot(Tag(sessionKey)) }

// IsNodeKey reports whether key is a slot's node marker (nodeKey).
func IsNodeKey(key string) bool {
	tag, ok := strings.CutPrefix(key, keyRoot+"{n")
	if !ok {
		return false
	}
	tag, ok = strings.CutSuffix(tag, "}:node")
	return ok && tag != "" && nodeKey(hashSlot("n"+tag)) == key
}
