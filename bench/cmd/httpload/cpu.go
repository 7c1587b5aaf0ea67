package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on
// every Linux this tool runs on).
const clockTick = 10 * time.Millisecond

// cpuTime returns the CPU time (user + system) process pid has used so far,
// from /proc; pid 0 means this process. ok is false where /proc is missing.
func cpuTime(pid int) (d time.Duration, ok bool) {
	path := "/proc/self/stat"
	if pid != 0 {
		path = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * clockTick, true
}

// cpuMeter measures the CPU time some processes use over one phase.
type cpuMeter struct {
	pids  []int
	start []time.Duration
}

func startCPU(pids ...int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: make([]time.Duration, len(pids))}
	for i, p := range pids {
		m.start[i], _ = cpuTime(p)
	}
	return m
}

// stop returns the CPU time each process used since startCPU (-1 where it
// could not be read).
func (m *cpuMeter) stop() []time.Duration {
	out := make([]time.Duration, len(m.pids))
	for i, p := range m.pids {
		now, ok := cpuTime(p)
		if !ok || p < 0 {
			out[i] = -1
			continue
		}
		out[i] = now - m.start[i]
	}
	return out
}
