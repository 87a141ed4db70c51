//go:build unix

package nativecli

import (
	"os/exec"
	"syscall"
)

// SysProcAttr puts a CLI process in a process group of its own, so that the
// commands it runs die with it, and (on Linux) kills it when the worker dies.
func SysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(a)
	return a
}

// KillGroup kills the process group of cmd (started with SysProcAttr).
func KillGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
