package main

import (
	"os/exec"
	"syscall"
)

// killWithParent makes Linux kill a served replica if this tool dies
// without stopping it.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
