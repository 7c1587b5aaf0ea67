package web

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/tokenlimit/tokenlimit/config"
	"github.com/tokenlimit/tokenlimit/memstore"
	"github.com/tokenlimit/tokenlimit/service"
	"github.com/tokenlimit/tokenlimit/service/stats"
)

// BenchmarkOverviewEvent is the work of one overview event, for a service
// of ten limits that all decided in every second: the first event of a
// stream (300 seconds) and each one after it (4 seconds).
func BenchmarkOverviewEvent(b *testing.B) {
	yaml := "limits:\n"
	for i := range 10 {
		yaml += fmt.Sprintf("  - {name: limit-%d, key: [user], algorithm: sliding_log, limit: 5/5s}\n", i)
	}
	cfg, err := config.Parse([]byte(yaml), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	store, _ := memstore.New(memstore.Options{})
	svc, err := service.New(cfg, service.Options{Store: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	st := &stats.Stats{}
	now := time.Now()
	for s := range stats.Seconds {
		at := now.Add(-time.Duration(s) * time.Second)
		for _, l := range cfg.Limits {
			st.Count(at, l.Name, stats.Denied)
		}
		st.Time(at, time.Microsecond)
	}
	d := &dashboard{svc: svc, opts: withDefaults(Options{Stats: st})}
	for _, seconds := range []int{stats.Seconds, 4} {
		b.Run(fmt.Sprintf("seconds=%d", seconds), func(b *testing.B) {
			var size int
			for b.Loop() {
				data, err := json.Marshal(d.snapshot(seconds))
				if err != nil {
					b.Fatal(err)
				}
				size = len(data)
			}
			b.ReportMetric(float64(size), "bytes/event")
		})
	}
}
