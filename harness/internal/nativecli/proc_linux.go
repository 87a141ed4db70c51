package nativecli

import "syscall"

// setPdeathsig makes the kernel kill the CLI process when the worker process
// dies, so a crashed worker leaves no orphan behind.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
