//go:build !linux

package main

import "time"

// sleepPrecise is time.Sleep outside Linux (about 1 ms of granularity:
// latencies from the schedule include it).
func sleepPrecise(d time.Duration) { time.Sleep(d) }

func lockPacerThread() func() { return func() {} }
