//go:build !linux

package redisserver

import "os/exec"

// killWithParent does nothing outside Linux: the tools stop their server on
// every normal exit and on interrupt.
func killWithParent(*exec.Cmd) {}
