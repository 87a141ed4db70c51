//go:build unix && !linux

package claude

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}
