package client

import (
	"time"

	"github.com/teamster-fleet/teamster/bus"
)

// What the tests of client_test read or set inside a Client.

// Followed is the number of handles c follows: the entries of its routing
// map.
func Followed(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.handles)
}

// Inbox is c's inbox: its events subscription serves Inbox(c) + ".*".
func Inbox(c *Client) string { return c.inbox }

// SetInbox replaces c's inbox. A test gives c a subject that NATS refuses to
// subscribe (a real subscribe failure), then gives it a good one back.
func SetInbox(c *Client, inbox string) {
	c.mu.Lock()
	c.inbox = inbox
	c.mu.Unlock()
}

// SetFollowFor makes every handle accepted from now on follow its attempt
// for d, instead of for as long as its events can come; it returns a
// function that puts the rule back.
func SetFollowFor(d time.Duration) (restore func()) {
	old := followFor
	followFor = func(*bus.Attempt) time.Duration { return d }
	return func() { followFor = old }
}
