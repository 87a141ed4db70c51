package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// A stalled proxy forwards nothing, holds the connection open, and delivers
// what was sent once healed; a severed one closes connections and refuses
// new ones until healed.
func TestProxyStallSeverHeal(t *testing.T) {
	p, err := newProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("through the proxy: %q, %v", got, err)
	}

	p.stall()
	if got, err := roundTrip(t, c, r, "two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled: got %q, %v; want a read timeout", got, err)
	}
	p.heal()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after heal: %q, %v; want the line sent while stalled", got, err)
	}

	p.sever()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("severed: the connection still reads")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c2.Read(make([]byte, 1)); err == nil {
			t.Fatal("severed: a new connection was served")
		}
		c2.Close()
	}
	p.heal()
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if got, err := roundTrip(t, c3, bufio.NewReader(c3), "three", 5*time.Second); err != nil || got != "three" {
		t.Fatalf("healed: %q, %v", got, err)
	}
}
