//go:build !linux

package main

import "os/exec"

// killWithParent does nothing outside Linux: the tool stops its child on
// every normal exit and on interrupt.
func killWithParent(*exec.Cmd) {}
