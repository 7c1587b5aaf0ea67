package main

import (
	"os/exec"
	"syscall"
)

// killWithParent makes Linux kill redis-server if this tool dies without
// stopping it.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
