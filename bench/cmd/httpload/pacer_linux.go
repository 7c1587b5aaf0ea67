package main

import (
	"runtime"
	"syscall"
	"time"
)

// sleepPrecise sleeps d with nanosleep(2) on the calling thread: the
// kernel's high-resolution timer wakes it within tens of microseconds on an
// idle machine, where time.Sleep rounds short waits up to about a
// millisecond (the runtime's poller waits in whole milliseconds).
func sleepPrecise(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}

// lockPacerThread keeps the pacer on one OS thread, which nanosleep blocks.
func lockPacerThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}
