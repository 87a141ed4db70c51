//go:build !unix

package nativecli

import (
	"os/exec"
	"syscall"
)

// SysProcAttr is nil: no process groups here.
func SysProcAttr() *syscall.SysProcAttr { return nil }

// KillGroup kills cmd's process.
func KillGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
