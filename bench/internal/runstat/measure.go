// Package runstat holds what the benchmark commands measure with: a
// process's CPU time and the median of a run's figures.
package runstat

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/PID/stat's CPU times: 10 ms on
// Linux.
const clockTick = 10 * time.Millisecond

// CPUTime returns the CPU time (user + system) process pid has used, from
// /proc/PID/stat, in steps of 10 ms; pid 0 means this process. ok is false
// where /proc is missing or unreadable.
func CPUTime(pid int) (d time.Duration, ok bool) {
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

// Median returns the median of xs (the mean of the two middle values when
// len(xs) is even), 0 for none. xs is not changed.
func Median[T ~int | ~int64 | ~float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
