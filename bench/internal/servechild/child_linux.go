package servechild

import (
	"os/exec"
	"syscall"
)

// killWithParent makes Linux kill the served child if this tool dies
// without stopping it.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
