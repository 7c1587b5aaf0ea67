//go:build !linux

package redistest

import "os/exec"

// killWithParent does nothing outside Linux: there a server whose test
// binary dies without running its cleanups is left running.
func killWithParent(*exec.Cmd) {}
