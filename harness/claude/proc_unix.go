//go:build unix

package claude

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the CLI in a process group of its own, so that the
// commands it runs die with it, and (on Linux) kills it when the worker dies.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(a)
	return a
}

// killGroup kills the CLI's process group.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
