package main

import (
	"time"

	"github.com/tokenlimit/tokenlimit/bench/internal/runstat"
)

// cpuMeter measures the CPU time some processes use over one phase.
type cpuMeter struct {
	pids  []int
	start []time.Duration
}

func startCPU(pids ...int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: make([]time.Duration, len(pids))}
	for i, p := range pids {
		m.start[i], _ = runstat.CPUTime(p)
	}
	return m
}

// stop returns the CPU time each process used since startCPU (-1 where it
// could not be read).
func (m *cpuMeter) stop() []time.Duration {
	out := make([]time.Duration, len(m.pids))
	for i, p := range m.pids {
		now, ok := runstat.CPUTime(p)
		if !ok || p < 0 {
			out[i] = -1
			continue
		}
		out[i] = now - m.start[i]
	}
	return out
}
