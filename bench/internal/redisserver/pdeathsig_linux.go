package redisserver

import (
	"os/exec"
	"syscall"
)

// killWithParent makes Linux kill redis-server if the tool dies without
// stopping it.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
