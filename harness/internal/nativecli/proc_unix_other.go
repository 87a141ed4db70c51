//go:build unix && !linux

package nativecli

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
