//go:build unix && !linux

package codex

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
