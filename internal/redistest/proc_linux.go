package redistest

import (
	"os/exec"
	"syscall"
)

// killWithParent asks Linux to SIGKILL redis-server if the test binary dies
// without running its cleanups (a -timeout panic, a crash, kill -9), so that
// no orphaned server keeps a port. Best effort: the signal is tied to the OS
// thread that started the process, which the Go runtime keeps alive.
func killWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
