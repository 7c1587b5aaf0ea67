//go:build !linux

package servechild

import "os/exec"

// killWithParent does nothing outside Linux: the tool stops its child on
// every normal exit and on interrupt.
func killWithParent(*exec.Cmd) {}
